"""gpumem.config in detail: device arguments, return values, memory info,
statistics, gpumem's extensions (fractions, release_unused) and the mapping
of C statuses to exceptions."""

from conftest import assert_output, run, run_stderr


def test_device_arguments_in_every_form():
    run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        forms = [gpus[1], 'GPU:1', '/device:GPU:1', '/physical_device:GPU:1', '/gpu:1',
                 'gpu:1', '/job:localhost/replica:0/task:0/device:GPU:1',
                 ('/physical_device:GPU:1', 'GPU')]
        for form in forms:
            tf.config.experimental.set_memory_growth(form, True)
            assert tf.config.experimental.get_memory_growth(form) is True, form
            tf.config.experimental.set_memory_growth(form, False)
        assert tf.config.experimental.get_memory_growth(gpus[0]) is None
        assert tf.config.experimental.get_memory_growth(gpus[1]) is False

        # logical devices: names, objects, indices, and a physical GPU with one
        tf.config.set_logical_device_configuration(gpus[0], [
            tf.config.LogicalDeviceConfiguration(memory_limit=1024),
            tf.config.LogicalDeviceConfiguration(memory_limit=2048)])
        lgpus = tf.config.list_logical_devices('GPU')
        assert [d.name for d in lgpus] == ['/device:GPU:0', '/device:GPU:1', '/device:GPU:2']
        limit = lambda d: tf.config.experimental.get_memory_info(d)['limit']
        assert limit(lgpus[1]) == limit('GPU:1') == limit('/device:GPU:1') == limit(1) == 2 << 30
        assert limit(gpus[1]) == limit('/physical_device:GPU:1') == limit('GPU:2')
        try:
            limit(gpus[0])          # two logical devices live on it
        except ValueError as e:
            assert '/device:GPU:0, /device:GPU:1' in str(e), e
        else:
            raise AssertionError('a GPU with two logical devices is ambiguous')
        """)


def test_get_and_set_return_values_as_tensorflow():
    out = run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        cpus = tf.config.list_physical_devices('CPU')
        print(tf.config.experimental.set_memory_growth(gpus[0], True))
        print(tf.config.get_logical_device_configuration(gpus[0]))
        print(tf.config.set_logical_device_configuration(gpus[1], []))
        print(tf.config.get_logical_device_configuration(gpus[1]))
        print(tf.config.get_logical_device_configuration(cpus[0]))
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        print(tf.config.list_logical_devices('CPU'))
        print(tf.config.get_visible_devices('CPU'))
        print(tf.config.list_physical_devices('TPU'), tf.config.list_physical_devices('gpu'))
        print(tf.config.experimental.get_device_details(cpus[0]))
        """, "A100:40GiB:8.0,TITAN X:12GiB:6.1")
    assert_output(out, """
        None
        None
        None
        []
        None
        [LogicalDevice(name='/device:CPU:0', device_type='CPU'), LogicalDevice(name='/device:CPU:1', device_type='CPU')]
        [PhysicalDevice(name='/physical_device:CPU:0', device_type='CPU')]
        [] []
        {}
        """)


def test_device_details_and_float_limits():
    run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        assert tf.config.experimental.get_device_details(gpus[1]) == {
            'device_name': 'TITAN X', 'compute_capability': (6, 1)}
        tf.config.set_logical_device_configuration(gpus[0], [
            tf.config.LogicalDeviceConfiguration(memory_limit=1536.5, experimental_priority=-1),
            tf.config.LogicalDeviceConfiguration(memory_limit=None)])
        conf = tf.config.get_logical_device_configuration(gpus[0])
        assert conf[0].memory_limit == 1536.5 and conf[0].experimental_priority == -1
        assert conf[1].memory_limit is None
        info = [tf.config.experimental.get_memory_info(i) for i in (0, 1)]
        assert info[0]['limit'] == int(1536.5 * 2**20) // 256 * 256, info[0]
        # the unlimited one shares the rest of the GPU's budget
        assert info[1]['limit'] > 30 << 30, info[1]
        """, "A100:40GiB:8.0,TITAN X:12GiB:6.1")


def test_a_limit_past_2_to_the_64_bytes_is_refused_not_cut():
    run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        # 2**44 + 1 MB is 2**64 + 2**20 bytes: its low 64 bits are a 1 MiB limit
        for mb in (2**44 + 1, 2**44, 1e30):
            try:
                tf.config.set_logical_device_configuration(
                    gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=mb)])
            except ValueError as e:
                assert 'more than 2**64 bytes' in str(e), e
            else:
                raise AssertionError(mb)
        assert tf.config.get_logical_device_configuration(gpus[0]) is None
        assert tf.config.experimental.get_memory_info('GPU:0')['limit'] > 10 << 30
        """)


def test_limits_and_fractions_that_c_cannot_hold_raise_value_error():
    run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        # under one byte: int() gives 0, which C reads as no cap at all
        for mb, words in ((1e-7, 'less than one byte'), (10**400, 'more than 2**64 bytes'),
                          (-10**400, 'not a positive number')):
            try:
                tf.config.set_logical_device_configuration(
                    gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=mb)])
            except ValueError as e:
                assert words in str(e), e
            else:
                raise AssertionError(mb)
        assert tf.config.get_logical_device_configuration(gpus[0]) is None
        # an int past a double's range: ValueError, as for any fraction out of [0, 1]
        for bad in (10**400, -10**400):
            try:
                tf.set_memory_fraction(gpus[0], bad)
            except ValueError as e:
                assert 'not in [0, 1]' in str(e), e
            else:
                raise AssertionError(bad)
        assert tf.get_memory_fraction(gpus[0]) == 0.0
        """)


def test_visible_devices_from_a_tuple_of_two_names():
    run("""
        import gpumem as tf
        # two names, not a (name, device_type) pair
        tf.config.set_visible_devices(('GPU:0', 'GPU:2'), 'GPU')
        assert [d.name for d in tf.config.get_visible_devices('GPU')] == [
            '/physical_device:GPU:0', '/physical_device:GPU:2']
        # the pair form still names one device
        tf.config.set_visible_devices(('/physical_device:GPU:1', 'GPU'), 'GPU')
        assert [d.name for d in tf.config.get_visible_devices('GPU')] == [
            '/physical_device:GPU:1']
        """, "12GiB,24GiB,8GiB")


def test_memory_info_keys_and_reset_memory_stats():
    run("""
        import gpumem as tf
        tf.config.experimental.set_memory_growth('GPU:0', True)
        info = tf.config.experimental.get_memory_info('GPU:0')
        assert list(info) == ['current', 'peak', 'reserved', 'peak_reserved', 'limit',
                              'largest_free_block', 'num_allocs', 'num_frees', 'num_ooms'], info
        assert all(type(v) is int for v in info.values())
        assert info['current'] == info['peak'] == info['reserved'] == 0

        a = tf.malloc(3 << 20)
        b = tf.malloc(1 << 20)
        a.free()
        info = tf.config.experimental.get_memory_info('GPU:0')
        assert info['current'] == 1 << 20 and info['peak'] == 4 << 20, info
        assert info['num_allocs'] == 2 and info['num_frees'] == 1, info
        assert tf.config.experimental.get_memory_usage('GPU:0') == 1 << 20

        tf.config.experimental.reset_memory_stats('GPU:0')
        info = tf.config.experimental.get_memory_info('GPU:0')
        assert info['peak'] == info['current'] == 1 << 20, info
        assert info['num_allocs'] == info['num_frees'] == 0, info
        assert info['peak_reserved'] == info['reserved'], info
        """)


def test_memory_fraction_per_gpu():
    run("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        tf.set_memory_fraction(gpus[0], 0.25)
        tf.set_memory_fraction('GPU:1', 0.5)
        assert tf.get_memory_fraction(gpus[0]) == 0.25
        assert tf.get_memory_fraction(gpus[1]) == 0.5
        for bad in (1.5, -0.1, float('nan')):
            try:
                tf.set_memory_fraction(gpus[0], bad)
            except ValueError as e:
                assert 'gpumem_set_memory_fraction' in str(e), e
            else:
                raise AssertionError(bad)
        try:
            tf.set_memory_fraction(gpus[0], '0.5')
        except TypeError:
            pass
        else:
            raise AssertionError('a string fraction')
        assert tf.config.experimental.get_memory_info('GPU:0')['limit'] == 3 << 30
        assert tf.config.experimental.get_memory_info('GPU:1')['limit'] == 12 << 30
        try:
            tf.set_memory_fraction(None, 0.1)
        except RuntimeError as e:
            assert str(e).startswith('Physical devices cannot be modified after being initialized')
        else:
            raise AssertionError('a fraction after initialization')
        """, "12GiB,24GiB")


def test_memory_fraction_for_every_gpu_at_once():
    run("""
        import gpumem as tf
        tf.set_memory_fraction(None, 0.5)
        assert [tf.get_memory_fraction(g) for g in tf.config.list_physical_devices('GPU')] == [0.5, 0.5]
        """)


def test_release_unused_gives_memory_back():
    run("""
        import gpumem as tf
        assert tf.release_unused() == 0          # nothing reserved before initialization
        tf.config.experimental.set_memory_growth('GPU:0', True)
        with tf.malloc(64 << 20) as buf:
            reserved = tf.config.experimental.get_memory_info('GPU:0')['reserved']
            assert reserved >= 64 << 20
            assert tf.release_unused('GPU:0') == 0   # its region is in use
        assert tf.config.experimental.get_memory_info('GPU:0')['reserved'] == reserved
        assert tf.release_unused('GPU:0') == reserved
        assert tf.config.experimental.get_memory_info('GPU:0')['reserved'] == 0
        # greedy pools give their memory back too, and take it again on demand
        greedy = tf.config.experimental.get_memory_info('GPU:1')['reserved']
        assert greedy > 0 and tf.release_unused() == greedy
        tf.malloc(1 << 20, 'GPU:1').free()
        try:
            tf.release_unused('GPU:5')
        except ValueError as e:
            assert 'no such logical device' in str(e), e
        else:
            raise AssertionError('release_unused of a missing device')
        """)


def test_driver_calls_per_gpu_and_summed():
    run("""
        import gpumem as tf
        calls = tf.driver_calls()                 # initializes nothing
        assert not tf.is_initialized()
        assert list(calls)[:2] == ['cuCtxPushCurrent_v2', 'cuCtxPopCurrent_v2'], calls
        assert 'cuMemMap' in calls and 'cuStreamWaitEvent' in calls
        assert all(c == {'calls': 0, 'ns': 0, 'bytes': 0} for c in calls.values())
        gpus = tf.config.list_physical_devices('GPU')
        tf.config.experimental.set_memory_growth(gpus[0], True)
        with tf.malloc(6 << 20):
            pass
        g0, g1, all_ = tf.driver_calls(gpus[0]), tf.driver_calls('GPU:1'), tf.driver_calls()
        assert g0['cuMemMap']['calls'] > 0 and g0['cuMemMap']['bytes'] >= 6 << 20
        assert g1['cuMemAlloc_v2']['calls'] == 1      # GPU 1 is greedy: one region
        for name in all_:
            for key in ('calls', 'ns', 'bytes'):
                assert all_[name][key] == g0[name][key] + g1[name][key], (name, key)
        # a snapshot carries the same figures, per device, the entry points called
        snap = tf.snapshot()
        assert snap['devices'][0]['driver_calls'] == {
            k: v for k, v in tf.driver_calls(gpus[0]).items() if v['calls']}
        for bad, kind in (('GPU:7', ValueError), ('CPU:0', ValueError), (3, TypeError)):
            try:
                tf.driver_calls(bad)
            except kind:
                pass
            else:
                raise AssertionError('driver_calls(%r)' % (bad,))
        """)


def test_environment_forces_growth():
    out = run("""
        import gpumem as tf
        print([tf.config.experimental.get_memory_growth(g)
               for g in tf.config.list_physical_devices('GPU')])
        """, env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    assert_output(out, "[True, True]")


def test_environment_overrides_an_explicit_growth_setting_and_says_so():
    # as TensorFlow's TF_FORCE_GPU_ALLOW_GROWTH overrides its configuration,
    # with a warning on standard error (the default runtime has no log callback)
    err = run_stderr("""
        import gpumem as tf
        gpus = tf.config.list_physical_devices('GPU')
        tf.config.experimental.set_memory_growth(gpus[1], False)
        assert tf.config.experimental.get_memory_growth(gpus[1]) is False
        assert tf.config.experimental.get_memory_info('GPU:1')['reserved'] == 0
        """, env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"})
    assert err == ("gpumem: GPU:1: memory growth on, overriding the off set for it, "
                   "because TF_FORCE_GPU_ALLOW_GROWTH is set\n"), err


def test_initialize_and_is_initialized():
    run("""
        import gpumem as tf
        tf.config.list_physical_devices('GPU')
        tf.config.get_visible_devices()
        tf.config.experimental.get_memory_growth('GPU:0')
        assert not tf.is_initialized()      # none of these initializes
        tf.initialize()
        tf.initialize()
        assert tf.is_initialized()
        """)


def test_status_exceptions():
    run("""
        import gpumem
        from gpumem import errors
        assert issubclass(errors.InvalidArgumentError, ValueError)
        assert issubclass(errors.NoSuchDeviceError, ValueError)
        assert issubclass(errors.AlreadyInitializedError, RuntimeError)
        assert issubclass(errors.OutOfMemoryError, MemoryError)
        assert errors.ResourceExhaustedError is errors.OutOfMemoryError
        assert issubclass(errors.InvalidPointerError, ValueError)
        assert issubclass(errors.BackendError, RuntimeError)
        assert issubclass(errors.UnsupportedError, RuntimeError)
        assert issubclass(errors.UnrecognizedDeviceError, TypeError)
        assert issubclass(errors.UnrecognizedDeviceError, ValueError)
        for cls in (errors.InvalidArgumentError, errors.OutOfMemoryError):
            assert issubclass(cls, errors.GpumemError)
        e = errors.from_status(99, "from the future")
        assert type(e) is errors.GpumemError and "99" in str(e)

        try:
            gpumem.malloc(1 << 50)
        except MemoryError as e:
            assert isinstance(e, errors.ResourceExhaustedError)
            assert e.status == 4 and e.status_name == 'GPUMEM_ERR_OUT_OF_MEMORY'
            assert str(e).startswith('gpumem_malloc(/device:GPU:0'), e
        else:
            raise AssertionError('a petabyte')
        assert gpumem.config.experimental.get_memory_info('GPU:0')['num_ooms'] == 1
        """)


def test_bad_environment_is_an_error_with_the_variable_named():
    out = run("""
        import gpumem as tf
        try:
            tf.config.list_physical_devices('GPU')
        except ValueError as e:
            print(e)
        """, gpus="12GB,,4GiB")
    assert "GPUMEM_SIM_DEVICES" in out and "12GB" in out, out
