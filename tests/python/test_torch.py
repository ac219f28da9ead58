"""gpumem.torch against the stand-in PyTorch (tests/python/standins/torch), on
simulated GPUs: use() makes gpumem the allocator, out of memory raises with
PyTorch's words (through libgpumem_torch.so and a stand-in for PyTorch's C++
boundary, tests/cpp/torch_boundary.cc), the statistics report gpumem's figures
for the device asked, empty_cache gives memory back, restore() undoes it, and
without libgpumem_torch.so use() warns once and falls back to the C pair.

The real PyTorch on a real GPU: tests/python/test_gpu_torch.py.
"""

import json
import os
import shutil

import pytest

from conftest import PYTHON_DIR, ROOT, run, run_stderr

STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")


def build_dir():
    lib = os.environ.get("GPUMEM_LIBRARY") or os.path.join(ROOT, "build", "lib",
                                                          "libgpumem.so")
    return os.path.dirname(os.path.dirname(os.path.abspath(lib)))


def standin_env(extra=None):
    """The stand-ins first on the path, and PyTorch's C++ boundary; skips the
    test where no C++ compiler built libgpumem_torch.so and the boundary."""
    boundary = os.path.join(build_dir(), "tests", "libtorch_boundary.so")
    shim = os.path.join(build_dir(), "cpp", "libgpumem_torch.so")
    for path in (boundary, shim):
        if not os.path.exists(path):
            pytest.skip("%s not built (no C++ compiler?)" % path)
    env = {"PYTHONPATH": STANDINS + os.pathsep + PYTHON_DIR,
           "TORCH_STANDIN_BOUNDARY": boundary}
    env.update(extra or {})
    return env


PROLOGUE = """
    import sys, warnings
    import gpumem, gpumem.torch, torch
    assert torch.__file__.startswith(%r), torch.__file__     # the stand-in
    info = lambda i: gpumem.config.experimental.get_memory_info(i)
""" % STANDINS


def test_importing_gpumem_imports_neither_torch_nor_gpumem_torch():
    run("""
        import sys
        import gpumem
        assert 'gpumem.torch' not in sys.modules and 'torch' not in sys.modules
        import gpumem.torch
        assert 'torch' not in sys.modules      # only use() imports it
        assert gpumem.torch.library_path is None and gpumem.torch.raises_on_oom is None
        """, env=standin_env())


def test_out_of_memory_raises_with_pytorchs_words_and_the_process_goes_on():
    out = run(PROLOGUE + """
    allocator = gpumem.torch.use()
    assert gpumem.torch.raises_on_oom is True
    assert gpumem.torch.library_path.endswith('libgpumem_torch.so')
    t = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')
    assert t.data_ptr() and info(0)['current'] == 1 << 20
    try:
        torch.empty(200 << 30, dtype=torch.uint8, device='cuda')
    except RuntimeError as e:
        message = str(e)
    else:
        raise AssertionError('200 GiB on a 12 GiB GPU')
    assert message.startswith('CUDA out of memory. gpumem_malloc_async(/device:GPU:0, '
                              '200.00 GiB, stream (nil)): out of memory'), message
    assert info(0)['num_ooms'] == 1
    u = torch.empty(1 << 30, dtype=torch.uint8, device='cuda')   # and it goes on
    assert u.data_ptr() and info(0)['current'] == (1 << 30) + (1 << 20)
    del t, u
    assert info(0)['current'] == 0 and info(0)['num_frees'] == 2
    print(message)
    """, env=standin_env())
    assert out.startswith("CUDA out of memory.")


def test_a_batch_size_finder_halves_until_it_fits():
    # What accelerate's find_executable_batch_size and Lightning's finder do:
    # catch a RuntimeError whose one argument says "CUDA out of memory.", halve,
    # try again. Under gpumem the process lives through every try.
    out = run(PROLOGUE + """
    gpumem.config.set_logical_device_configuration(
        gpumem.config.list_physical_devices('GPU')[0],
        [gpumem.config.LogicalDeviceConfiguration(memory_limit=1024)])   # 1 GiB
    gpumem.torch.use()
    weights = torch.empty(1 << 20, device='cuda')    # 1 MiB the model keeps

    def finder(step, batch):
        while batch:
            try:
                return step(batch)
            except RuntimeError as e:
                if not (len(e.args) == 1 and 'CUDA out of memory.' in e.args[0]):
                    raise
                batch //= 2
        raise RuntimeError('no batch fits')

    def step(batch):                          # one float32 tensor of 1 MiB a sample
        x = torch.empty(batch, 1 << 18, dtype=torch.float32, device='cuda')
        return batch

    print(finder(step, 4096))
    print(info(0)['num_ooms'], info(0)['current'])
    """, env=standin_env())
    assert out.split() == ["512", "3", str(1 << 20)], out


def test_the_device_asked_is_the_cuda_device():
    run(PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.set_logical_device_configuration(gpus[0], [
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256),
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256)])
    gpumem.torch.use()
    a = torch.empty(4096, device='cuda:1')               # GPU 1: /device:GPU:2
    b = torch.empty(8192, device='cuda')                 # current device 0: GPU:0
    assert info(2)['current'] == 4096 and info(0)['current'] == 8192
    assert info(1)['current'] == 0
    assert torch.cuda.memory_allocated(1) == 4096
    assert torch.cuda.memory_allocated('cuda:1') == 4096
    assert torch.cuda.memory_allocated() == torch.cuda.memory_allocated(0) == 8192
    torch.cuda.set_device(1)
    assert torch.cuda.memory_allocated() == 4096
    try:
        torch.cuda.memory_allocated(5)
    except ValueError as e:                             # gpumem's NoSuchDeviceError
        assert 'no such GPU (there are 2)' in str(e), e
    else:
        raise AssertionError('no GPU 5')
    try:
        torch.empty(300 << 20, device='cuda:0')          # over its 256 MiB
    except RuntimeError as e:
        assert str(e).startswith('CUDA out of memory. gpumem_malloc_async(/device:GPU:0'), e
    else:
        raise AssertionError('over the limit')
    try:
        torch.empty(64, device='cuda:7')                 # not out of memory: no such GPU
    except RuntimeError as e:
        assert str(e) == ('gpumem: gpumem_torch_alloc(GPU:7): no such GPU '
                          '(there are 2)'), e
    else:
        raise AssertionError('no GPU 7')
    """, env=standin_env())


def test_the_statistics_are_gpumems():
    run(PROLOGUE + """
    from collections import OrderedDict
    gpumem.config.experimental.set_memory_growth(
        gpumem.config.list_physical_devices('GPU')[0], True)
    gpumem.torch.use()
    assert torch.cuda.memory_stats() == OrderedDict()    # gpumem not initialized yet
    assert torch.cuda.memory_allocated() == torch.cuda.memory_reserved() == 0
    assert not gpumem.is_initialized()                   # ... and still not
    a = torch.empty(3 << 20, device='cuda')
    b = torch.empty(1000, device='cuda')
    c = torch.empty(5 << 20, device='cuda')
    del c
    i = info(0)
    for module in (torch.cuda, torch.cuda.memory):       # both names, one function
        assert module.memory_allocated() == i['current'] == (3 << 20) + 1024
        assert module.max_memory_allocated() == i['peak'] == (8 << 20) + 1024
        assert module.memory_reserved() == i['reserved'] > 0
        assert module.max_memory_reserved() == i['peak_reserved']
    stats = torch.cuda.memory_stats(0)
    assert list(stats) == sorted(stats)
    assert stats['allocation.all.current'] == 2
    assert stats['allocation.all.allocated'] == 3 and stats['allocation.all.freed'] == 1
    assert stats['num_ooms'] == 0 and stats['num_alloc_retries'] == 0
    assert stats['gpumem.limit_bytes'] == i['limit']
    assert stats['gpumem.largest_free_block'] == i['largest_free_block']
    nested = torch.cuda.memory_stats_as_nested_dict(0)
    assert nested['allocated_bytes']['all']['current'] == i['current']

    try:
        torch.empty(1 << 50, device='cuda')
    except RuntimeError:
        pass
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
    assert torch.cuda.max_memory_reserved() == torch.cuda.memory_reserved()
    stats = torch.cuda.memory_stats()              # the counters go on
    assert stats['allocation.all.allocated'] == 3 and stats['num_ooms'] == 1
    del b
    stats = torch.cuda.memory_stats()
    assert stats['allocation.all.current'] == 1 and stats['allocation.all.freed'] == 2
    # PyTorch's num_device_alloc / num_device_free: the driver calls that took
    # memory from GPU 0 and gave it back (as gpumem.driver_calls counts them)
    def device_calls(names):
        calls = gpumem.driver_calls('GPU:0')
        return sum(calls[n]['calls'] for n in names)
    stats = torch.cuda.memory_stats()
    assert stats['num_device_alloc'] == device_calls(('cuMemAlloc_v2', 'cuMemCreate')) > 0
    assert stats['num_device_free'] == device_calls(('cuMemFree_v2', 'cuMemUnmap'))
    torch.cuda.empty_cache()                       # unmaps what is free
    stats = torch.cuda.memory_stats()
    assert stats['num_device_free'] == device_calls(('cuMemFree_v2', 'cuMemUnmap')) > 0
    torch.cuda.reset_accumulated_memory_stats()
    stats = torch.cuda.memory_stats()
    assert stats['allocation.all.allocated'] == stats['allocation.all.freed'] == 0
    assert stats['num_ooms'] == 0 and stats['allocation.all.current'] == 1
    assert stats['num_device_alloc'] == stats['num_device_free'] == 0
    c = torch.empty(64 << 20, device='cuda')       # grows again: counted from the reset
    assert torch.cuda.memory_stats()['num_device_alloc'] > 0
    del c

    summary = torch.cuda.memory_summary()
    assert 'gpumem memory summary' in summary and 'CUDA device 0' in summary, summary
    assert 'Allocated memory      |   3.00 MiB |' in summary, summary
    assert all(len(line) == 77 for line in summary.splitlines()), summary
    print(summary)
    """, env=standin_env())


def test_empty_cache_gives_memory_back():
    run(PROLOGUE + """
    gpumem.config.experimental.set_memory_growth(
        gpumem.config.list_physical_devices('GPU')[1], True)
    gpumem.torch.use()
    torch.cuda.empty_cache()                       # before anything: nothing to do
    assert not gpumem.is_initialized()
    keep = torch.empty(1 << 20, device='cuda:1')
    tensors = [torch.empty(256 << 20, device='cuda:1') for _ in range(4)]
    grown = torch.cuda.memory_reserved(1)
    del tensors
    assert torch.cuda.memory_reserved(1) == grown  # cached until asked
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved(1) < grown - (512 << 20), (
        grown, torch.cuda.memory_reserved(1))
    assert torch.cuda.memory_allocated(1) == 1 << 20 and keep.data_ptr()
    """, env=standin_env())


def test_a_hole_given_back_is_not_counted_as_cached():
    """empty_cache unmaps the hole between two live tensors of one region: it is
    no longer reserved, and memory_stats' inactive_split_bytes (cached, from
    the snapshot) leaves it out, so that active + inactive stays within
    reserved, as in PyTorch's expandable segments."""
    out = run(PROLOGUE + """
    import json
    gpumem.config.experimental.set_memory_growth(
        gpumem.config.list_physical_devices('GPU')[0], True)
    gpumem.torch.use()
    x = torch.empty(96 << 20, device='cuda')           # one region of 96 MiB
    del x
    a = torch.empty(32 << 20, device='cuda')
    b = torch.empty(32 << 20, device='cuda')
    c = torch.empty((32 << 20) - (1 << 20), device='cuda')
    del b
    torch.cuda.empty_cache()
    print(json.dumps(torch.cuda.memory_stats(0)))
    """, env=standin_env())
    s = json.loads(out)
    # the region was mapped in eight extents of 12 MiB: the two wholly inside
    # b's 32 MiB went back, 8 MiB of b stay mapped (and cached), and c's tail
    assert s["reserved_bytes.all.current"] == 72 << 20
    assert s["active_bytes.all.current"] == 63 << 20
    assert s["inactive_split_bytes.all.current"] == (8 + 1) << 20
    assert s["inactive_split.all.current"] == 2
    assert s["reserved_bytes.all.current"] == (
        s["active_bytes.all.current"] + s["inactive_split_bytes.all.current"])


def test_restore_puts_pytorchs_functions_back():
    run(PROLOGUE + """
    originals = {name: getattr(torch.cuda.memory, name) for name in gpumem.torch.PATCHED}
    allocator = gpumem.torch.use()
    assert gpumem.torch.use() is allocator               # a second call changes nothing
    # the private ones (_snapshot...) are torch.cuda.memory's only, as in PyTorch
    in_cuda = [name for name in gpumem.torch.PATCHED if not name.startswith('_')]
    assert not any(hasattr(torch.cuda, name) for name in gpumem.torch.PATCHED
                   if name not in in_cuda)
    for name in gpumem.torch.PATCHED:
        if name in in_cuda:
            assert getattr(torch.cuda, name) is getattr(torch.cuda.memory, name)
        assert getattr(torch.cuda.memory, name) is not originals[name]
    t = torch.empty(4096, device='cuda')
    assert torch.cuda.memory_allocated() == 4096
    gpumem.torch.restore()
    gpumem.torch.restore()                               # twice: nothing more
    for name in gpumem.torch.PATCHED:
        if name in in_cuda:
            assert getattr(torch.cuda, name) is originals[name], name
        assert getattr(torch.cuda.memory, name) is originals[name], name
    # PyTorch's functions again, under a pluggable allocator that PyTorch keeps
    for call in (torch.cuda.memory_allocated, torch.cuda.memory_stats,
                 torch.cuda.reset_peak_memory_stats, torch.cuda.memory._snapshot):
        try:
            call()
        except RuntimeError as e:
            assert 'does not yet support' in str(e), e
        else:
            raise AssertionError(call)
    u = torch.empty(4096, device='cuda')                 # still gpumem's memory
    assert info(0)['current'] == 8192
    assert gpumem.torch.use() is allocator               # patched anew, same allocator
    assert torch.cuda.memory_allocated() == 8192
    """, env=standin_env())


def test_names_imported_before_use():
    # PyTorch's memory_allocated reads memory_stats from its module, and its
    # memory_stats memory_stats_as_nested_dict: imported before use(), they report
    # gpumem's figures all the same. One that calls the C++ side itself
    # (reset_peak_memory_stats) is PyTorch's, and raises.
    run(PROLOGUE + """
    from torch.cuda import memory_allocated, memory_stats, reset_peak_memory_stats
    gpumem.torch.use()
    t = torch.empty(4096, device='cuda')
    assert memory_allocated() == 4096
    assert memory_stats()['allocated_bytes.all.current'] == 4096
    try:
        reset_peak_memory_stats()
    except RuntimeError as e:
        assert 'does not yet support resetPeakStats' in str(e), e
    else:
        raise AssertionError('an early reset_peak_memory_stats is PyTorch')
    torch.cuda.reset_peak_memory_stats()          # through the module: gpumem's
    """, env=standin_env())


def test_use_after_pytorch_allocated_is_refused_with_the_remedy():
    run(PROLOGUE + """
    torch.cuda.init()                  # PyTorch's own allocator is in use
    try:
        gpumem.torch.use()
    except RuntimeError as e:
        assert str(e).startswith("gpumem.torch.use(): PyTorch refuses to change its "
                                 "allocator (Can't swap an already initialized "
                                 "allocator)"), e
        assert 'Call gpumem.torch.use() before the first CUDA tensor' in str(e), e
    else:
        raise AssertionError('PyTorch cannot swap an initialized allocator')
    assert torch.cuda.memory.memory_stats() == {}        # nothing patched
    assert gpumem.torch.library_path is None
    """, env=standin_env())


def test_without_the_cpp_library_use_warns_once_and_out_of_memory_is_null(tmp_path):
    # A libgpumem with no libgpumem_torch.so beside it (nor a build folder's cpp/).
    lib = os.path.join(build_dir(), "lib", "libgpumem.so")
    if not os.path.exists(lib):
        pytest.skip("no %s" % lib)
    (tmp_path / "lib").mkdir()
    copy = tmp_path / "lib" / "libgpumem.so"
    shutil.copy(os.path.realpath(lib), copy)
    err = run_stderr(PROLOGUE + """
    warnings.simplefilter('always')
    with warnings.catch_warnings(record=True) as caught:
        gpumem.torch.use()
        gpumem.torch.use()
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert caught[0].category is RuntimeWarning
    assert message.startswith('gpumem.torch.use(): libgpumem_torch.so not found ('), message
    assert 'out of memory cannot raise' in message, message
    assert gpumem.torch.raises_on_oom is False
    assert gpumem.torch.library_path == gpumem.library_path
    t = torch.empty(200 << 30, dtype=torch.uint8, device='cuda')
    assert t.data_ptr() == 0                   # what PyTorch does with the NULL
    u = torch.empty(4096, device='cuda')
    assert u.data_ptr() and torch.cuda.memory_allocated() == 4096   # stats work
    assert torch.cuda.memory_stats()['num_ooms'] == 1
    """, env={"PYTHONPATH": STANDINS + os.pathsep + PYTHON_DIR,
              "GPUMEM_LIBRARY": str(copy)})
    # libgpumem's C pair says why on standard error, one line
    assert err.startswith("gpumem: gpumem_malloc_async(/device:GPU:0, 200.00 GiB, stream "
                          "(nil)): out of memory"), err


# ------------------------------------------------- hooks, keys, history --

#: PyTorch's statistics (torch.cuda.memory_stats' documentation, and
#: c10/core/CachingDeviceAllocator.h's DeviceStats) that gpumem does not count,
#: each absent from gpumem's memory_stats rather than made up (docs/python.md,
#: gpumem.torch.UNCOUNTED): none since the inactive split blocks' peaks and
#: totals are counted (issue 32).
ABSENT = ()
#: A nested dictionary keyed by private pool ids: in the flat memory_stats only
#: as "reserved_bytes_by_private_pools.<a>_<b>.<pool>.<field>", one per pool.
NESTED = ("reserved_bytes_by_private_pools",)


def inactive_split(snapshot, device=None):
    """(blocks, bytes): PyTorch's inactive split blocks in gpumem's snapshot (a
    dict, gpumem.snapshot's JSON), of logical device `device` (None: all): the
    free blocks of segments that also hold others, each with its bytes that are
    mapped (a release or the trim unmaps whole granules of free blocks; a block
    with none mapped is none, as in PyTorch's unmapped expandable segments).
    What gpumem_memory_info's inactive_split_blocks and _bytes count."""
    blocks = size = 0
    for seg in snapshot["segments"]:
        if device is not None and seg["device"] != device:
            continue
        if len(seg["blocks"]) > 1:
            for block in seg["blocks"]:
                cached = block["size"] - block.get("unmapped_size", 0)
                if block["state"] == "inactive" and cached > 0:
                    blocks += 1
                    size += cached
    return blocks, size


def pytorch_keys(doc):
    """The flat keys a memory_stats docstring lists: ``"a.{x,y}.{c,p}"`` expanded."""
    import itertools
    import re
    keys = set()
    for pattern in re.findall(r'``"([a-z_.{},]+)"``', doc):
        parts = [p.strip("{}").split(",") for p in pattern.split(".")]
        keys.update(".".join(c) for c in itertools.product(*parts))
    return {k for k in keys if k[0].isalpha()}  # not the doc's ``"_"`` (a separator)


# PyTorch 2.15's torch.cuda.memory_stats documentation, the keys part (the real
# package's own is read in test_torch_real.py): the stand-in has none.
PYTORCH_2_15_KEYS_DOC = '''
    - ``"allocated.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"allocated_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"segment.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"reserved_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"active.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"active_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"inactive_split.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"inactive_split_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
    - ``"num_alloc_retries"`` - ``"num_ooms"`` - ``"num_sync_all_streams"``
    - ``"num_device_alloc"`` - ``"num_device_free"`` - ``"num_oom_rejections"``
    - ``"max_split_size"``
    - ``"oversize_allocations.{current,peak,allocated,freed}"``
    - ``"oversize_segments.{current,peak,allocated,freed}"``
    - ``"requested_bytes.{all,large_pool,small_pool}.{current,peak,allocated,freed}"``
'''


def expected_keys(doc):
    # the documentation's "allocated." is DeviceStats' "allocation" (the name
    # memory_stats returns; its own memory_summary reads "allocation")
    keys = {k.replace("allocated.", "allocation.", 1) if k.startswith("allocated.") else k
            for k in pytorch_keys(doc)}
    return keys - set(ABSENT) - set(NESTED)


def test_memory_stats_has_pytorchs_keys_with_gpumems_figures():
    out = run(PROLOGUE + """
    import json, sys
    gpumem.config.experimental.set_memory_growth(
        gpumem.config.list_physical_devices('GPU')[0], True)
    gpumem.torch.use()
    small = torch.empty(1000, device='cuda')            # small pool: at most 1 MiB
    large = torch.empty(3 << 20, device='cuda')
    gone = torch.empty(5 << 20, device='cuda')
    del gone
    stats = torch.cuda.memory_stats(0)
    print(json.dumps([stats, torch.cuda.memory._snapshot()]))
    """, env=standin_env())
    stats, snapshot = json.loads(out)
    ours = {k for k in stats if not k.startswith("gpumem.")}
    expected = expected_keys(PYTORCH_2_15_KEYS_DOC)
    assert ours == expected, (sorted(ours - expected), sorted(expected - ours))
    assert not ours & set(ABSENT)
    s = stats
    # PyTorch's allocations, counted by libgpumem_torch.so
    assert s["allocation.all.current"] == 2 and s["allocation.all.allocated"] == 3
    assert s["allocation.small_pool.current"] == 1 and s["allocation.large_pool.current"] == 1
    assert s["requested_bytes.all.current"] == 1000 + (3 << 20)   # the stand-in's
    assert s["allocated_bytes.small_pool.current"] == 1024        # uint8 by default
    assert s["allocated_bytes.large_pool.peak"] == 8 << 20
    assert s["allocated_bytes.large_pool.freed"] == 5 << 20
    # gpumem's pool, from its snapshot: every live block is active
    assert s["active.all.current"] == 2
    assert s["active_bytes.all.current"] == s["allocated_bytes.all.current"]
    assert s["reserved_bytes.all.current"] == sum(
        s["reserved_bytes.%s.current" % p] for p in ("small_pool", "large_pool"))
    assert s["segment.all.current"] >= 1
    assert s["reserved_bytes.all.current"] >= (
        s["active_bytes.all.current"] + s["inactive_split_bytes.all.current"])
    # one pool: large_pool is all of it, small_pool 0 by construction
    for m in ("segment", "reserved_bytes", "active", "active_bytes"):
        for f in ("current", "peak", "allocated", "freed"):
            assert s["%s.large_pool.%s" % (m, f)] == s["%s.all.%s" % (m, f)], (m, f)
            assert s["%s.small_pool.%s" % (m, f)] == 0, (m, f)
    assert s["active.all.peak"] == 3 and s["active.all.allocated"] == 3
    assert s["active.all.freed"] == 1
    assert s["active_bytes.all.freed"] == 5 << 20
    assert s["active_bytes.all.peak"] == s["allocated_bytes.all.peak"]
    # configuration figures: no split limit, no rejection policy
    assert s["max_split_size"] == -1 and s["num_oom_rejections"] == 0
    assert all(s["oversize_%s.%s" % (k, f)] == 0 for k in ("allocations", "segments")
               for f in ("current", "peak", "allocated", "freed"))
    assert set(ABSENT) == set(UNCOUNTED_2_15)
    # the inactive split blocks, every field: 'gone' joined the free tail of
    # the region (after 'large'), one block, as the snapshot says
    blocks, size = inactive_split(snapshot)
    assert blocks == 1 and size >= 5 << 20, (blocks, size)
    for m, n in (("inactive_split", blocks), ("inactive_split_bytes", size)):
        for p in ("all", "large_pool"):
            assert s["%s.%s.current" % (m, p)] == n, (m, p, s)
            assert s["%s.%s.peak" % (m, p)] >= n, (m, p)
            assert (s["%s.%s.allocated" % (m, p)] - s["%s.%s.freed" % (m, p)]
                    == n), (m, p)
        assert all(s["%s.small_pool.%s" % (m, f)] == 0
                   for f in ("current", "peak", "allocated", "freed")), m


#: gpumem.torch.UNCOUNTED, written out: what ABSENT must be (nothing, since
#: PyTorch 2.15's twelve inactive split peaks and totals are counted).
UNCOUNTED_2_15 = []


def test_the_pools_figures_are_counted_and_reset_as_pytorchs():
    # a 1 GiB logical device that grows: 600 MiB taken and freed (not the tail)
    # stay cached, so 700 MiB more do not fit until gpumem gives the cached region back and
    # tries again (PyTorch's num_alloc_retries), with the growth trim off (it
    # would give the cached memory back before growing, without a retry)
    run(PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.experimental.set_memory_growth(gpus[0], True)
    gpumem.config.set_logical_device_configuration(
        gpus[0], [gpumem.config.LogicalDeviceConfiguration(memory_limit=1024)])
    gpumem.torch.use()
    keep = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')
    a = torch.empty(600 << 20, dtype=torch.uint8, device='cuda')
    after = torch.empty(1 << 20, dtype=torch.uint8, device='cuda')  # a is no tail
    del a
    s = torch.cuda.memory_stats()
    assert s['num_alloc_retries'] == 0
    reserved_before = s['reserved_bytes.all.current']
    b = torch.empty(700 << 20, dtype=torch.uint8, device='cuda')
    s = torch.cuda.memory_stats()
    assert s['num_alloc_retries'] == 1, s['num_alloc_retries']
    assert s['reserved_bytes.all.freed'] > 0                    # given back, then
    assert (s['reserved_bytes.all.allocated'] - s['reserved_bytes.all.freed']
            == s['reserved_bytes.all.current'])
    assert (s['segment.all.allocated'] - s['segment.all.freed']
            == s['segment.all.current'] >= 1)
    assert s['segment.all.peak'] >= s['segment.all.current']
    assert s['active.all.allocated'] == 4 and s['active.all.freed'] == 1
    assert s['active.all.peak'] == 3 and s['active.all.current'] == 3
    assert s['active_bytes.all.allocated'] == (2 << 20) + (1300 << 20)
    assert s['reserved_bytes.all.peak'] >= reserved_before
    del b, after
    torch.cuda.reset_peak_memory_stats()
    s = torch.cuda.memory_stats()
    assert s['active.all.peak'] == s['active.all.current'] == 1
    assert s['segment.all.peak'] == s['segment.all.current']
    assert s['active_bytes.all.peak'] == s['active_bytes.all.current'] == 1 << 20
    assert s['num_alloc_retries'] == 1                          # not a peak
    torch.cuda.reset_accumulated_memory_stats()
    s = torch.cuda.memory_stats()
    for m in ('segment', 'reserved_bytes', 'active', 'active_bytes'):
        assert s[m + '.all.allocated'] == s[m + '.all.freed'] == 0, m
    assert s['num_alloc_retries'] == s['num_sync_all_streams'] == 0
    assert s['active.all.current'] == 1
    c = torch.empty(4096, dtype=torch.uint8, device='cuda')
    s = torch.cuda.memory_stats()
    assert s['active.all.allocated'] == 1 and s['active_bytes.all.allocated'] == 4096
    assert 'retries after giving memory back: 0' in torch.cuda.memory_summary()
    """, env=standin_env({"GPUMEM_GROWTH_TRIM": "off"}))


def test_without_the_hooks_use_says_what_follows_and_a_capture_is_refused():
    run(PROLOGUE + """
    warnings.simplefilter('always')
    with warnings.catch_warnings(record=True) as caught:
        gpumem.torch.use()
    message = str(caught[0].message)
    assert len(caught) == 1 and caught[0].category is RuntimeWarning
    assert gpumem.torch.hooks_set == {s: False for s, _, _, _ in gpumem.torch.HOOKS}
    assert "has no set_record_stream_fn, set_reset_fn, set_begin_allocate_to_pool" in message
    assert "Tensor.record_stream does nothing" in message, message
    assert "capturing one (torch.cuda.graph, CUDAGraph.capture_begin) raises" in message
    assert all(sentence in message for sentence in gpumem.torch.missing)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g):
            torch.empty(4096, device='cuda')
    except RuntimeError as e:
        assert str(e).startswith('gpumem.torch: CUDA graph capture is refused'), e
    else:
        raise AssertionError('a capture without private pools went on')
    assert info(0)['current'] == 0 and not g.capturing
    gpumem.torch.restore()                      # the allocator stays: so does the guard
    try:
        torch.cuda.graphs.CUDAGraph().capture_begin()
    except RuntimeError:
        pass
    else:
        raise AssertionError('restore() lifted the guard')
    """, env=standin_env())


def test_record_memory_history_and_snapshot_are_gpumems(tmp_path):
    path = str(tmp_path / "snap.pickle")
    run(PROLOGUE + """
    import pickle
    gpumem.torch.use()
    torch.cuda.memory._record_memory_history(max_entries=1000)
    t = torch.empty(1 << 20, device='cuda')
    snap = torch.cuda.memory._snapshot()
    assert snap['format'] == 'gpumem-snapshot'
    actions = [e['action'] for e in snap['device_traces'][0]]
    assert 'alloc' in actions, actions
    torch.cuda.memory._dump_snapshot(%r)
    with open(%r, 'rb') as f:
        assert pickle.load(f)['segments'] == snap['segments']
    torch.cuda.memory._record_memory_history('all', 'all', 'all', 10)   # positional
    torch.cuda.memory._record_memory_history(enabled=None)   # off
    del t
    after = torch.cuda.memory._snapshot()
    assert [e['action'] for e in after['device_traces'][0]] == []
    """ % (path, path), env=standin_env())


#: One scenario on a fixed pool (logical device 0: 256 MiB, taken whole) and a
#: growing one (1: up to 512 MiB): random allocations (256 bytes to 24 MiB) and
#: frees, frees of everything (each segment left one free block), releases
#: (gpumem_release_unused: whole regions, and granules of the free blocks
#: between live ones) and a peak reset, with the event history on for a while
#: (its records share the split figures' rare path). After each call, gpumem's figures
#: (gpumem_memory_info) must be the snapshot's (inactive_split above), and
#: where the call changed no memory of the device's (no growth or trim: one
#: change), the peak and the totals PyTorch's Stat would have: an increase of
#: the net change adds to the total and may raise the peak. A call that maps
#: or unmaps counts each change on its own: their figures are taken as they
#: are, and the next call is checked from them.
SPLIT_SCENARIO = """
    import ctypes, json, random, sys
    import gpumem
    from gpumem import _lib
    from gpumem.snapshot import snapshot_json
    sys.path.insert(0, %r)
    from test_torch import inactive_split
    gpus = gpumem.config.list_physical_devices('GPU')
    LDC = gpumem.config.LogicalDeviceConfiguration
    gpumem.config.set_logical_device_configuration(gpus[0], [LDC(memory_limit=256)])
    gpumem.config.experimental.set_memory_growth(gpus[1], True)
    gpumem.config.set_logical_device_configuration(gpus[1], [LDC(memory_limit=512)])
    MIB = 1 << 20

    def info(d):
        i = _lib.MemoryInfoStruct()
        assert _lib.lib.gpumem_get_memory_info(None, d, ctypes.byref(i)) == 0
        return i

    def figures(i):
        return {'blocks': (i.inactive_split_blocks, i.peak_inactive_split_blocks,
                           i.inactive_split_blocks_total),
                'bytes': (i.inactive_split_bytes, i.peak_inactive_split_bytes,
                          i.inactive_split_bytes_total)}

    checked = {0: 0, 1: 0}
    for d in (0, 1):
        rng = random.Random(7 + d)
        live = []
        i = info(d)
        prev = figures(i)
        prev_reserved = (i.reserved_bytes, i.reserved_total_bytes)
        for step in range(%d):
            if step in (300, 900):  # the history on for a while: its records
                assert _lib.lib.gpumem_record_history(  # take the same paths' turn
                    None, 1000 if step == 300 else 0) == 0
            r = rng.random()
            op = ('free_all' if r < 0.01 else 'release' if r < 0.03 else
                  'reset' if r < 0.035 else
                  'free' if live and (r < 0.5 or len(live) > 60) else 'malloc')
            if op == 'malloc':
                size = int(256 * 2 ** rng.uniform(0, 16.6))
                p = ctypes.c_void_p()
                s = _lib.lib.gpumem_malloc(None, d, size, ctypes.byref(p))
                if s == 0:
                    live.append(p.value)
            elif op == 'free':
                p = live.pop(rng.randrange(len(live)))
                assert _lib.lib.gpumem_free(None, ctypes.c_void_p(p)) == 0
            elif op == 'free_all':
                for p in live:
                    assert _lib.lib.gpumem_free(None, ctypes.c_void_p(p)) == 0
                live = []
            elif op == 'release':
                released = ctypes.c_uint64()
                assert _lib.lib.gpumem_release_unused(None, d, ctypes.byref(released)) == 0
            else:
                assert _lib.lib.gpumem_reset_memory_stats(None, d) == 0
            i = info(d)
            now = figures(i)
            snap = inactive_split(json.loads(snapshot_json()), d)
            assert (now['blocks'][0], now['bytes'][0]) == snap, (d, step, op, now, snap)
            reserved = (i.reserved_bytes, i.reserved_total_bytes)
            # free_all is many calls; a release one change, whatever it gives back
            one_change = op == 'release' or (op in ('malloc', 'free') and
                                             reserved == prev_reserved)
            for k in ('blocks', 'bytes'):
                cur, peak, total = now[k]
                assert peak >= cur and total >= cur, (d, step, op, k, now[k])
                if op == 'reset':
                    assert (peak, total) == (cur, prev[k][2]), (d, step, k, now[k])
                elif one_change:
                    net = cur - prev[k][0]
                    want = (max(prev[k][1], cur), prev[k][2] + max(net, 0))
                    assert (peak, total) == want, (d, step, op, k, prev[k], now[k])
            checked[d] += one_change
            prev, prev_reserved = now, reserved
    print(json.dumps(checked))
"""


def test_the_inactive_split_figures_are_the_snapshots_and_pytorchs_stat():
    here = os.path.dirname(os.path.abspath(__file__))
    out = run(SPLIT_SCENARIO % (here, 1500))
    checked = json.loads(out.strip().splitlines()[-1])
    # most calls are one change each (on the growing pool too)
    assert checked["0"] > 1400 and checked["1"] > 1000, checked
