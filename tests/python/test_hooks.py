"""The framework hooks at the ABI level, on the simulated backend:

* PyTorch's pair, called through ctypes with the signatures
  torch.cuda.memory.CUDAPluggableAllocator documents
  (void *alloc(ssize_t size, int device, cudaStream_t stream);
   void free(void *ptr, ssize_t size, int device, cudaStream_t stream)),
  allocates and frees through gpumem's pools;
* the C allocator struct (gpumem_get_allocator) through its function pointers;
* gpumem.cupy_allocator with the stand-in CuPy (tests/python/standins/cupy):
  CuPy's current device and stream, its own OutOfMemoryError; and
  gpumem.torch_allocator with a fake `torch`: importing gpumem imports neither
  (gpumem.torch: test_torch.py);
* the ctypes struct layouts against the C compiler's, when one is present.
"""

import os
import shutil
import subprocess
import textwrap

import pytest

from conftest import PYTHON_DIR, ROOT, driver_double, run, run_stderr

# Declared from the documented signatures, independently of gpumem._lib.
TORCH_PROLOGUE = """
    import ctypes, gpumem
    so = ctypes.CDLL(gpumem.library_path)
    cudaStream_t = ctypes.c_void_p
    alloc = so.gpumem_torch_malloc          # void* (ssize_t, int, cudaStream_t)
    alloc.restype = ctypes.c_void_p
    alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, cudaStream_t]
    free = so.gpumem_torch_free             # void (void*, ssize_t, int, cudaStream_t)
    free.restype = None
    free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, cudaStream_t]
    so.gpumem_last_error.restype = ctypes.c_char_p
    info = lambda i: gpumem.config.experimental.get_memory_info(i)
"""


def test_torch_signatures_allocate_and_free_through_the_pools():
    run(TORCH_PROLOGUE + """
    stream = ctypes.c_void_p(0x1234)        # any stream: gpumem ignores it
    p = alloc(1 << 20, 1, stream)
    assert p and p % 256 == 0
    assert info(1)['current'] == 1 << 20 and info(0)['current'] == 0
    ctypes.memset(p, 7, 1 << 20)            # simulated GPU memory is host memory
    q = alloc(1000, 0, None)
    assert info(0)['current'] == 1024       # 256-byte granules
    free(p, 1 << 20, 1, stream)
    free(q, 1000, 0, None)
    assert info(0)['current'] == info(1)['current'] == 0
    assert info(1)['num_allocs'] == info(1)['num_frees'] == 1
    free(None, 0, 0, None)                  # PyTorch may free NULL: a no-op
    """)


def test_torch_failures_return_null_and_leave_a_message():
    run(TORCH_PROLOGUE + """
    assert alloc(0, 0, None) is None                      # nothing to allocate
    assert alloc(-5, 0, None) is None
    assert b'negative size -5' in so.gpumem_last_error()
    assert alloc(1 << 50, 0, None) is None                # over the budget
    assert so.gpumem_last_error().startswith(b'gpumem_malloc_async(/device:GPU:0')
    assert info(0)['num_ooms'] == 1
    assert alloc(64, 7, None) is None                     # no GPU 7
    assert so.gpumem_last_error() == (
        b'gpumem_torch_malloc(GPU:7): no such GPU (there are 2)')
    p = alloc(64, 0, None)
    free(p, 64, 0, None)
    free(p, 64, 0, None)                                  # double free: refused
    assert so.gpumem_last_error().startswith(b'gpumem_free_async('), so.gpumem_last_error()
    assert info(0)['num_frees'] == 1
    """)


def test_torch_device_is_the_cuda_device():
    # PyTorch's device is a CUDA ordinal, gpumem's physical index: its memory
    # comes from the first logical device on that GPU, whatever comes before it.
    run(TORCH_PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.set_logical_device_configuration(gpus[0], [
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256),
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256)])
    p = alloc(4096, 1, None)                # GPU 1: /device:GPU:2
    assert info(2)['current'] == 4096 and info(0)['current'] == info(1)['current'] == 0
    q = alloc(4096, 0, None)                # GPU 0: /device:GPU:0, the first half
    assert info(0)['current'] == 4096 and info(1)['current'] == 0
    assert alloc(300 << 20, 0, None) is None                # over its 256 MiB
    free(p, 4096, 1, None)
    free(q, 4096, 0, None)
    """)
    # a hidden GPU has no memory to give, and the others keep their ordinals
    run(TORCH_PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.set_visible_devices(gpus[1], 'GPU')
    assert alloc(4096, 0, None) is None
    assert so.gpumem_last_error() == (b'gpumem_torch_malloc(GPU:0): GPU:0 is hidden by '
                                      b'gpumem_set_visible_devices, so it has no logical device')
    p = alloc(4096, 1, None)                # GPU 1: /device:GPU:0 now
    assert info(0)['current'] == 4096
    free(p, 4096, 1, None)
    """)


def test_torch_failures_are_written_where_they_can_be_seen():
    # PyTorch does not check for NULL: without a log callback, standard error.
    err = run_stderr(TORCH_PROLOGUE + """
    assert alloc(1 << 50, 0, None) is None
    assert alloc(64, 0, None)
    """)
    assert err.startswith('gpumem: gpumem_malloc_async(/device:GPU:0, 1.00 PiB, stream (nil)): '
                      'out of memory'), err
    assert len(err.splitlines()) == 1, err
    # one line even when the message quotes a value with a newline in it
    err = run_stderr(TORCH_PROLOGUE + """
    assert alloc(64, 0, None) is None
    """, gpus="1GiB,\nX")
    assert len(err.splitlines()) == 1 and "1GiB,\\x0aX" in err, err


def auto_falls_back():
    """GPUMEM_BACKEND=auto with a CUDA driver whose cuInit finds no device (the
    test double, so on any machine): gpumem falls back to simulated GPUs."""
    return {"GPUMEM_BACKEND": "auto", "GPUMEM_CUDA_LIBRARY": driver_double(),
            "FAKECUDA_INIT_ERROR": "100"}        # CUDA_ERROR_NO_DEVICE


def test_torch_refuses_simulated_memory_that_auto_fell_back_to():
    # ... whose memory is host memory: never a pointer to hand PyTorch as device
    # memory.
    run(TORCH_PROLOGUE + """
    # the first call, before the runtime exists: its own message, not the
    # runtime's creation's (which once replaced it)
    assert alloc(-5, 0, None) is None
    assert so.gpumem_last_error() == (
        b'gpumem_torch_malloc(GPU:0): negative size -5 (or a size_t above SSIZE_MAX)')
    assert alloc(4096, 0, None) is None
    assert so.gpumem_last_error().startswith(
        b'gpumem_torch_malloc(GPU:0): no CUDA driver could be used, so '
        b'GPUMEM_BACKEND=auto fell back to simulated GPUs'), so.gpumem_last_error()
    kind = ctypes.c_int(0)
    so.gpumem_get_backend(None, ctypes.byref(kind))
    assert kind.value == 2                  # GPUMEM_BACKEND_SIM: it did fall back
    """, env=auto_falls_back())


def test_c_allocator_struct():
    run("""
        import ctypes, gpumem
        from gpumem import _lib
        so = ctypes.CDLL(gpumem.library_path)
        info = lambda i: gpumem.config.experimental.get_memory_info(i)

        old = _lib.AllocatorStruct()          # struct_size 0: a program before 0.2
        _lib.lib.gpumem_get_allocator(None, 1, ctypes.byref(old))
        assert old.struct_size == 32 and not old.allocate_async
        a = _lib.AllocatorStruct(struct_size=ctypes.sizeof(_lib.AllocatorStruct))
        _lib.lib.gpumem_get_allocator(None, 1, ctypes.byref(a))
        assert a.struct_size == ctypes.sizeof(_lib.AllocatorStruct) == 48
        assert a.logical == 1 and a.runtime is None
        assert not gpumem.is_initialized()        # getting one initializes nothing

        p = ctypes.c_void_p()
        assert a.allocate(ctypes.byref(a), 1 << 16, ctypes.byref(p)) == 0
        assert p.value and info(1)['current'] == 1 << 16
        ctypes.memset(p, 1, 1 << 16)
        assert a.deallocate(ctypes.byref(a), p) == 0
        assert info(1)['current'] == 0
        assert a.deallocate(ctypes.byref(a), p) == 5          # GPUMEM_ERR_INVALID_POINTER
        assert a.deallocate(ctypes.byref(a), None) == 0       # NULL: no-op
        assert a.allocate(ctypes.byref(a), 0, ctypes.byref(p)) == 0 and not p.value
        q = ctypes.c_void_p()                 # stream-ordered, on the legacy stream
        assert a.allocate_async(ctypes.byref(a), 4096, None, ctypes.byref(q)) == 0
        assert q.value and info(1)['current'] == 4096
        assert a.deallocate_async(ctypes.byref(a), q, None) == 0
        assert info(1)['current'] == 0
        assert a.allocate(ctypes.byref(a), 1 << 50, ctypes.byref(p)) == 4
        assert a.allocate(None, 16, ctypes.byref(p)) == 1     # self NULL

        # a copy is as good as the original (the struct is its own context)
        b = _lib.AllocatorStruct.from_buffer_copy(a)
        assert b.allocate(ctypes.byref(b), 256, ctypes.byref(p)) == 0
        assert info(1)['current'] == 256
        assert a.deallocate(ctypes.byref(a), p) == 0

        for bad in (2, -1):
            try:
                _lib.lib.gpumem_get_allocator(None, bad, ctypes.byref(a))
            except ValueError as e:
                assert e.status_name == 'GPUMEM_ERR_NO_SUCH_DEVICE', e
            else:
                raise AssertionError(bad)
        try:
            _lib.lib.gpumem_get_allocator(None, 0, None)
        except ValueError as e:
            assert e.status_name == 'GPUMEM_ERR_INVALID_ARGUMENT'
        else:
            raise AssertionError('out NULL')
        """)


def test_c_allocator_counts_the_configured_logical_devices():
    run("""
        import ctypes, gpumem
        from gpumem import _lib
        gpus = gpumem.config.list_physical_devices('GPU')
        gpumem.config.set_visible_devices(gpus[1], 'GPU')
        gpumem.config.set_logical_device_configuration(gpus[1], [
            gpumem.config.LogicalDeviceConfiguration(memory_limit=512)] * 3)
        a = _lib.AllocatorStruct()
        _lib.lib.gpumem_get_allocator(None, 2, ctypes.byref(a))   # before initialization
        try:
            _lib.lib.gpumem_get_allocator(None, 3, ctypes.byref(a))
        except gpumem.errors.NoSuchDeviceError:
            pass
        else:
            raise AssertionError('only 3 logical devices are configured')
        gpumem.initialize()
        _lib.lib.gpumem_get_allocator(None, 2, ctypes.byref(a))   # and after
        p = ctypes.c_void_p()
        assert a.allocate(ctypes.byref(a), 1 << 20, ctypes.byref(p)) == 0
        assert gpumem.config.experimental.get_memory_info(2)['current'] == 1 << 20
        """)


STANDINS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "standins")
# The stand-in CuPy (tests/python/standins/cupy) first on the path.
CUPY_ENV = {"PYTHONPATH": STANDINS + os.pathsep + PYTHON_DIR}
CUPY_PROLOGUE = """
    import sys
    import gpumem, cupy
    assert cupy.__file__.startswith(%r), cupy.__file__      # the stand-in
    info = lambda i: gpumem.config.experimental.get_memory_info(i)
""" % STANDINS


def test_cupy_allocator_imports_nothing_until_called():
    run("""
        import sys
        class Block:                         # as if neither were installed
            tried = []
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('cupy', 'torch'):
                    Block.tried.append(name)
                    raise ModuleNotFoundError("No module named %r" % name)
                return None
        sys.meta_path.insert(0, Block())
        import gpumem
        allocator = gpumem.cupy_allocator
        gpumem.torch_allocator
        assert Block.tried == [] and 'cupy' not in sys.modules, Block.tried
        try:
            allocator(1024)
        except ImportError:
            pass
        else:
            raise AssertionError('no cupy here, yet it allocated')
        assert Block.tried[:1] == ['cupy'], Block.tried
        """)


def test_cupy_allocator_with_the_standin_cupy():
    run(CUPY_PROLOGUE + """
    cupy.cuda.Device(1).use()
    cupy.cuda.set_allocator(gpumem.cupy_allocator)
    mp = cupy.cuda.alloc(3000)              # what CuPy's arrays call
    assert isinstance(mp, cupy.cuda.MemoryPointer) and mp.ptr % 256 == 0
    assert mp.mem.size == 3000 and mp.mem.device_id == 1
    assert type(mp.mem._owner).__name__ == '_StreamAllocation'  # on its stream
    assert info(1)['current'] == 3072 and info(0)['current'] == 0
    del mp                                  # CuPy drops it: gpumem frees it
    assert info(1)['current'] == 0 and info(1)['num_frees'] == 1

    cupy.cuda.Device(0).use()
    empty = gpumem.cupy_allocator(0)        # size 0: no allocation, explicit device
    assert empty.ptr == 0 and empty.mem.device_id == 0 and info(0)['num_allocs'] == 0
    """, env=CUPY_ENV)


def test_cupy_out_of_memory_is_cupys_own_error():
    out = run(CUPY_PROLOGUE + """
    gpumem.config.set_logical_device_configuration(
        gpumem.config.list_physical_devices('GPU')[0],
        [gpumem.config.LogicalDeviceConfiguration(memory_limit=64)])
    keep = gpumem.cupy_allocator(1 << 20)
    try:
        gpumem.cupy_allocator(1 << 30)
    except cupy.cuda.memory.OutOfMemoryError as e:
        assert type(e) is cupy.cuda.memory.OutOfMemoryError
        assert isinstance(e.__cause__, gpumem.errors.OutOfMemoryError)
        print(e)
    else:
        raise AssertionError('1 GiB in 64 MiB')
    again = gpumem.cupy_allocator(1 << 20)  # and it goes on
    assert info(0)['current'] == 2 << 20 and info(0)['num_ooms'] == 1
    """, env=CUPY_ENV)
    assert out.startswith(
        "Out of memory allocating 1,073,741,824 bytes (allocated so far: 1,048,576 "
        "bytes, limit set to: 67,108,864 bytes). gpumem: gpumem_malloc_async(/device:GPU:0, "
        "1.00 GiB, stream (nil)): out of memory"), out


def test_cupy_allocates_and_frees_on_the_current_stream():
    # The plumbing, over a stand-in for the library's stream-ordered API that
    # records the streams and allocates through gpumem_malloc: CuPy's current
    # stream goes to the allocation, and the free is on the same stream.
    run(CUPY_PROLOGUE + """
    import ctypes
    from gpumem import _lib, hooks
    calls = []
    def stream_malloc(logical, size, stream, out):
        calls.append(('malloc', logical, size, stream))
        _lib.lib.gpumem_malloc(None, logical, size, ctypes.byref(out))
    def stream_free(ptr, stream):
        calls.append(('free', ptr, stream))
        _lib.lib.gpumem_free(None, ptr)
    hooks._stream_api = lambda: (stream_malloc, stream_free)

    a = gpumem.cupy_allocator(4096)         # the null stream
    s = cupy.cuda.Stream()
    with s:
        b = gpumem.cupy_allocator(8192)
    assert calls == [('malloc', 0, 4096, 0), ('malloc', 0, 8192, s.ptr)], calls
    b_ptr = b.ptr
    del b                                   # freed on s, though s is not current
    assert calls[-1] == ('free', b_ptr, s.ptr), calls
    a_ptr = a.ptr
    with s:
        del a                               # freed on the null stream, its own
    assert calls[-1] == ('free', a_ptr, 0), calls
    assert info(0)['current'] == 0
    """, env=CUPY_ENV)


def test_cupy_stream_ordered_api_of_the_library():
    out = run(CUPY_PROLOGUE + """
    from gpumem import hooks
    print(hooks._stream_api() is not None)
    """, env=CUPY_ENV)
    if out.strip() != "True":
        pytest.skip("the library has no gpumem_malloc_async / gpumem_free_async")
    run(CUPY_PROLOGUE + """
    s = cupy.cuda.Stream()
    with s:
        a = gpumem.cupy_allocator(1 << 20)
    assert type(a.mem._owner).__name__ == '_StreamAllocation'
    assert a.mem._owner.stream == s.ptr and info(0)['current'] >= 1 << 20
    del a
    s.synchronize()
    with s:
        b = gpumem.cupy_allocator(1 << 20)  # reused at once on its own stream
    del b
    """, env=CUPY_ENV)


def test_cupy_device_is_the_cuda_device():
    run(CUPY_PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.set_logical_device_configuration(gpus[0], [
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256),
        gpumem.config.LogicalDeviceConfiguration(memory_limit=256)])
    cupy.cuda.Device(1).use()
    mp = gpumem.cupy_allocator(4096)        # CuPy's device 1: GPU 1, /device:GPU:2
    assert mp.mem.device_id == 1
    assert info(2)['current'] == 4096 and info(1)['current'] == 0
    with cupy.cuda.Device(0):
        mq = gpumem.cupy_allocator(4096)    # GPU 0: its first logical device
    assert info(0)['current'] == 4096
    cupy.cuda.Device(5).use()
    try:
        gpumem.cupy_allocator(4096)
    except gpumem.errors.NoSuchDeviceError as e:
        assert str(e) == ('cupy_allocator(): gpumem_cuda_device_logical(GPU:5): '
                          'no such GPU (there are 2)'), e
    else:
        raise AssertionError('no GPU 5')
    """, env=CUPY_ENV)
    run(CUPY_PROLOGUE + """
    try:
        gpumem.cupy_allocator(4096)
    except gpumem.errors.UnsupportedError as e:
        assert str(e).startswith('cupy_allocator(): ') and \\
            'GPUMEM_BACKEND=auto fell back to simulated GPUs' in str(e), e
    else:
        raise AssertionError('host memory handed to CuPy')
    """, env=dict(CUPY_ENV, **auto_falls_back()))


def test_torch_allocator_with_a_fake_torch():
    run("""
        import ctypes, sys, types, gpumem
        made = []
        torch = types.ModuleType('torch')
        torch.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(
            CUDAPluggableAllocator=lambda *args: made.append(args) or 'allocator'))
        sys.modules['torch'] = torch
        assert gpumem.torch_allocator() == 'allocator'
        (path, alloc_name, free_name), = made
        assert path == gpumem.library_path
        so = ctypes.CDLL(path)                # what PyTorch does with them
        getattr(so, alloc_name), getattr(so, free_name)
        assert (alloc_name, free_name) == ('gpumem_torch_malloc', 'gpumem_torch_free')
        """)


LAYOUT_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "gpumem.h"
#define S(t) printf(#t " %zu\n", sizeof(t));
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(t, f));
int main(void) {
    S(gpumem_physical_device) O(gpumem_physical_device, index)
    O(gpumem_physical_device, total_bytes)
    O(gpumem_physical_device, compute_minor)
    S(gpumem_logical_device_config) O(gpumem_logical_device_config, memory_limit_bytes)
    O(gpumem_logical_device_config, priority)
    S(gpumem_logical_device) O(gpumem_logical_device, memory_limit_bytes)
    O(gpumem_logical_device, memory_growth)
    S(gpumem_memory_info) O(gpumem_memory_info, current_bytes)
    O(gpumem_memory_info, num_ooms)
    S(gpumem_allocator) O(gpumem_allocator, runtime) O(gpumem_allocator, deallocate)
    S(gpumem_ssize)
    return 0;
}
"""


def test_ctypes_layouts_match_the_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to read the header's layouts")
    src = tmp_path / "layout.c"
    src.write_text(LAYOUT_C)
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                    str(exe)], check=True)
    c_side = subprocess.run([str(exe)], check=True, stdout=subprocess.PIPE,
                            text=True).stdout
    out = run("""
        import ctypes
        from gpumem import _lib
        pairs = [('gpumem_physical_device', _lib.PhysicalDeviceStruct),
                 ('gpumem_logical_device_config', _lib.LogicalDeviceConfigStruct),
                 ('gpumem_logical_device', _lib.LogicalDeviceStruct),
                 ('gpumem_memory_info', _lib.MemoryInfoStruct),
                 ('gpumem_allocator', _lib.AllocatorStruct)]
        fields = {'gpumem_physical_device': ['index', 'total_bytes', 'compute_minor'],
                  'gpumem_logical_device_config': ['memory_limit_bytes', 'priority'],
                  'gpumem_logical_device': ['memory_limit_bytes', 'memory_growth'],
                  'gpumem_memory_info': ['current_bytes', 'num_ooms'],
                  'gpumem_allocator': ['runtime', 'deallocate']}
        for name, st in pairs:
            print(name, ctypes.sizeof(st))
            for f in fields[name]:
                print('%s.%s %d' % (name, f, getattr(st, f).offset))
        print('gpumem_ssize', ctypes.sizeof(ctypes.c_ssize_t))
        """)
    assert sorted(out.splitlines()) == sorted(c_side.splitlines()), (out, c_side)


def test_the_structs_carry_their_struct_size():
    """Every struct the library fills or reads is made with struct_size set (one
    alone, or each element of an array); one whose struct_size is 0 is refused
    with the library's message, and the runtime stays uninitialized."""
    out = run("""
        import ctypes
        import gpumem
        from gpumem import _lib
        for st in (_lib.PhysicalDeviceStruct, _lib.LogicalDeviceConfigStruct,
                   _lib.LogicalDeviceStruct, _lib.MemoryInfoStruct):
            assert st().struct_size == ctypes.sizeof(st), st
            assert [e.struct_size for e in st.array(3)] == [ctypes.sizeof(st)] * 3, st
        info = _lib.MemoryInfoStruct()
        info.struct_size = 0
        try:
            _lib.lib.gpumem_get_memory_info(None, 0, ctypes.byref(info))
        except gpumem.errors.InvalidArgumentError as e:
            print(e)
        print(gpumem.is_initialized())
        print(gpumem.config.experimental.get_memory_info("GPU:1")["limit"] > 0)
        print(len(gpumem.config.list_logical_devices("GPU")))
        """)
    lines = out.splitlines()
    assert lines[0].startswith("gpumem_get_memory_info: out.struct_size is 0 (not set): "
                               "set it to sizeof(gpumem_memory_info)"), out
    assert lines[1:] == ["False", "True", "2"], out


def test_cupy_memory_pool_reports_gpumems_pool():
    # Under gpumem's allocator CuPy's own pool says 0: gpumem.cupy_memory_pool()
    # has MemoryPool's methods over gpumem's pool of CuPy's current device.
    run(CUPY_PROLOGUE + """
    gpus = gpumem.config.list_physical_devices('GPU')
    pool = gpumem.cupy_memory_pool()
    pool.set_limit(fraction=0.5)                     # before gpumem's first allocation
    with cupy.cuda.Device(1):
        pool.set_limit(size=512 << 20)               # GPU 1: one logical device of 512 MiB
        try:
            pool.set_limit(size=(1 << 20) + 1)
        except ValueError as e:
            assert 'whole MiB' in str(e), e
        else:
            raise AssertionError('a limit of a byte past a MiB')
    cupy.cuda.set_allocator(pool.malloc)
    a = cupy.cuda.alloc(3 << 20)
    b = cupy.cuda.alloc(1000)
    assert pool.used_bytes() == info(0)['current'] == (3 << 20) + 1024
    assert pool.total_bytes() == info(0)['reserved'] >= pool.used_bytes()
    assert pool.free_bytes() == pool.total_bytes() - pool.used_bytes()
    assert pool.get_limit() == info(0)['limit'] == 6 << 30   # half of 12 GiB
    del a
    assert pool.n_free_blocks() >= 1
    with cupy.cuda.Device(1):
        assert pool.get_limit() == 512 << 20 and pool.used_bytes() == 0
        c = cupy.cuda.alloc(4096)
        assert pool.used_bytes() == 4096
        del c
    try:
        pool.set_limit(fraction=0.25)                # gpumem's budget is fixed now
    except RuntimeError as e:
        print('refused:', e)
    else:
        raise AssertionError('a limit changed after initialization')
    del b
    pool.free_all_blocks()
    assert pool.used_bytes() == 0
    """, env=CUPY_ENV)


def test_torch_record_stream_and_empty_cache_hooks_on_the_driver_double():
    # PyTorch's record-stream hook (void (void*, cudaStream_t)) and reset hook
    # (void (void)), called by address as PyTorch's allocator object calls them,
    # over the CUDA driver double whose streams the scenario holds busy.
    double = driver_double()
    err = run_stderr(TORCH_PROLOGUE + """
    fake = ctypes.CDLL(%r)
    record = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
        ctypes.cast(so.gpumem_torch_record_stream, ctypes.c_void_p).value)
    empty = ctypes.CFUNCTYPE(None)(ctypes.cast(so.gpumem_torch_empty_cache,
                                               ctypes.c_void_p).value)
    empty()                                   # before the first allocation:
    assert not gpumem.is_initialized()        # nothing to give back, nothing made
    s1, s2 = ctypes.c_void_p(0x5151), ctypes.c_void_p(0x5252)
    c = alloc(8 << 20, 0, s1)
    record(c, s2)                             # a kernel on s2 uses it
    fake.fakecuda_hold_stream(s2)             # ... and still runs
    free(c, 8 << 20, 0, s1)
    assert info(0)['current'] == 8 << 20      # kept for s2
    d = alloc(8 << 20, 0, s1)                 # the next tensor on s1
    assert d != c, 'handed out while s2 still used it'
    fake.fakecuda_release_stream(s2)
    free(d, 8 << 20, 0, s1)
    empty()                                   # waits for s2, gives the pool back
    assert info(0)['current'] == 0 and info(0)['reserved'] == 0, info(0)
    record(None, s2)                          # an empty tensor's: nothing
    local = ctypes.c_char()
    record(ctypes.addressof(local), s2)       # not gpumem's: silent, changes nothing
    assert so.gpumem_last_error().startswith(b'gpumem_record_stream('), \\
        so.gpumem_last_error()
    """ % double, env={"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": double,
                       "FAKECUDA_DEVICES": "Fake GPU:16GiB:8.0",
                       "GPUMEM_FORCE_ALLOW_GROWTH": "true"})
    assert err == "", err
