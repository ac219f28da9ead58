"""The log of the default runtime (which no program can give a callback):
GPUMEM_LOG_LEVEL sends it to standard error, one line per message; unset or
off, the library prints nothing but the warnings a user must see (a forced
growth, a GPU whose driver fails). And what a failed release still reports."""

from conftest import driver_double, run, run_stderr

INIT = """
    import gpumem
    gpumem.initialize()
    """


def test_no_log_on_standard_error_unless_asked():
    assert run_stderr(INIT) == ""
    assert run_stderr(INIT, env={"GPUMEM_LOG_LEVEL": "off"}) == ""
    assert run_stderr(INIT, env={"GPUMEM_LOG_LEVEL": "warning"}) == ""


def test_log_level_info_shows_each_devices_budget():
    err = run_stderr(INIT, env={"GPUMEM_LOG_LEVEL": "INFO"})
    assert err.splitlines() == [
        "gpumem: INFO: /device:GPU:0 on GPU:0: budget 10.50 GiB (12.00 GiB free at "
        "initialization minus 1.50 GiB headroom for the driver), memory growth off",
        "gpumem: INFO: /device:GPU:1 on GPU:1: budget 22.50 GiB (24.00 GiB free at "
        "initialization minus 1.50 GiB headroom for the driver), memory growth off",
    ], err


def test_log_level_debug_shows_regions():
    err = run_stderr("""
        import gpumem
        gpumem.config.experimental.set_memory_growth('GPU:0', True)
        with gpumem.malloc(4096, device='GPU:0'):
            pass
        gpumem.release_unused('GPU:0')
        """, env={"GPUMEM_LOG_LEVEL": "debug"})
    lines = err.splitlines()
    # the simulated GPU models virtual memory management: growth maps into a range
    assert any(l.startswith("gpumem: DEBUG: /device:GPU:0: mapped a region of 2.00 MiB")
               for l in lines), err
    assert any(l.startswith("gpumem: DEBUG: /device:GPU:0: gave a free region of 2.00 MiB")
               for l in lines), err
    assert "gpumem: INFO: /device:GPU:0: released 2.00 MiB of unused memory" in lines, err


def test_a_bad_log_level_is_refused_by_name():
    proc = run(INIT, env={"GPUMEM_LOG_LEVEL": "verbose"}, expect_fail=True)
    assert "GPUMEM_LOG_LEVEL: 'verbose' is not one of off, error, warning, info, debug" \
        in proc.stderr, proc.stderr


def test_the_forced_growth_warning_is_written_once_with_the_log_on():
    script = """
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        tf.config.experimental.set_memory_growth(gpus[1], False)
        tf.initialize()
        """
    for level in ("warning", "error", "debug"):
        err = run_stderr(script, env={"TF_FORCE_GPU_ALLOW_GROWTH": "true",
                                      "GPUMEM_LOG_LEVEL": level})
        warned = [l for l in err.splitlines() if "overriding the off set for it" in l]
        assert len(warned) == 1, (level, err)
        assert warned[0].startswith("gpumem: WARNING: GPU:1: memory growth on"
                                    if level != "error" else "gpumem: GPU:1: memory growth on"), err


def fallback(init_error, **env):
    """Standard error of `auto` over the CUDA double whose cuInit fails so."""
    return run_stderr(INIT, env=dict({"GPUMEM_BACKEND": "auto",
                                      "GPUMEM_CUDA_LIBRARY": driver_double(),
                                      "FAKECUDA_INIT_ERROR": str(init_error)}, **env))


def test_a_machine_without_a_gpu_falls_back_to_simulated_gpus_at_info():
    # CUDA_ERROR_NO_DEVICE (100) and the stub library of a container (34)
    for code, name in ((100, "CUDA_ERROR_NO_DEVICE"), (34, "CUDA_ERROR_STUB_LIBRARY")):
        err = fallback(code, GPUMEM_LOG_LEVEL="info")
        assert "gpumem: INFO: no CUDA (cuInit(0) failed: %s (%d)" % (name, code) in err, err
        assert "; using simulated GPUs" in err, err
        assert fallback(code) == ""
        assert fallback(code, GPUMEM_LOG_LEVEL="warning") == ""


def test_a_gpu_whose_driver_fails_is_warned_of_even_with_the_log_off():
    # CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803): a GPU is there, its driver fails
    said = ("the CUDA driver is there but does not work (cuInit(0) failed: "
            "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)")
    for level, prefix in ((None, "gpumem: "), ("off", "gpumem: "),
                          ("error", "gpumem: "), ("warning", "gpumem: WARNING: "),
                          ("info", "gpumem: WARNING: ")):
        err = fallback(803, **({"GPUMEM_LOG_LEVEL": level} if level else {}))
        lines = [ln for ln in err.splitlines() if said in ln]
        assert len(lines) == 1, err
        assert lines[0].startswith(prefix + said), err
        assert lines[0].endswith("; using simulated GPUs, not the GPU "
                                 "(GPUMEM_BACKEND=cuda makes this an error)"), err
        assert "no CUDA" not in err, err


def test_a_partly_refused_release_still_says_what_went_back():
    # the driver refuses to free the first of two free regions (CUDA double)
    run("""
        import gpumem
        gpumem.config.experimental.set_memory_growth('GPU:0', True)
        a = gpumem.malloc(19 << 20, device='GPU:0')
        b = gpumem.malloc(19 << 20, device='GPU:0')
        a.free(); b.free()
        assert gpumem.config.experimental.get_memory_info('GPU:0')['reserved'] == 40 << 20
        try:
            gpumem.release_unused('GPU:0')
        except gpumem.errors.BackendError as e:
            assert e.released == 20 << 20, e.released
            assert 'cuMemFree_v2' in str(e), e
        else:
            raise AssertionError('the refusal was not reported')
        assert gpumem.config.experimental.get_memory_info('GPU:0')['reserved'] == 20 << 20
        """, env={"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": driver_double(),
                  "FAKECUDA_DEVICES": "Small:1GiB:8.0", "FAKECUDA_VMM": "0",
                  "FAKECUDA_FAIL": "cuMemFree_v2:1"})
