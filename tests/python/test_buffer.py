"""gpumem.malloc buffers on the simulated backend: the buffer protocol (fill
and read through a memoryview), the context manager, freeing when collected,
double frees, and the checks on sizes and devices."""

from conftest import driver_double, run


def test_fill_and_read_through_memoryview():
    run("""
        import gpumem
        buf = gpumem.malloc(4096, 'GPU:1')
        assert buf.nbytes == len(buf) == 4096 and buf.ptr % 256 == 0
        assert buf.device == gpumem.LogicalDevice('/device:GPU:1', 'GPU')
        with buf.memoryview() as view:
            assert view.format == 'B' and view.nbytes == 4096 and not view.readonly
            view[:] = bytes(range(256)) * 16
        with buf.memoryview() as again:
            assert bytes(again[250:260]) == bytes([250, 251, 252, 253, 254, 255, 0, 1, 2, 3])
            assert again[4095] == 255
        # the memory is the pointer's: read it with ctypes too
        import ctypes
        assert ctypes.string_at(buf.ptr + 1, 3) == bytes([1, 2, 3])
        assert not hasattr(buf, '__cuda_array_interface__')   # not device memory
        buf.free()
        """)


def test_context_manager_frees():
    run("""
        import gpumem
        info = lambda: gpumem.config.experimental.get_memory_info('GPU:0')
        with gpumem.malloc(1 << 20) as buf:
            assert info()['current'] == 1 << 20
            assert not buf.freed
        assert buf.freed and buf.ptr == 0 and 'freed' in repr(buf)
        assert info()['current'] == 0 and info()['num_frees'] == 1
        """)


def test_freed_when_collected():
    run("""
        import gc, gpumem
        info = lambda: gpumem.config.experimental.get_memory_info('GPU:0')
        buf = gpumem.malloc(1 << 20)
        assert info()['current'] == 1 << 20
        del buf                                  # no cycle: freed at once
        assert info()['current'] == 0
        for _ in range(100):                     # a loop that never calls free()
            gpumem.malloc(1 << 20)
        assert info()['current'] == 0 and info()['num_frees'] == 101
        """)


def test_views_keep_the_memory_alive():
    run("""
        import gpumem
        info = lambda: gpumem.config.experimental.get_memory_info('GPU:0')
        buf = gpumem.malloc(1024)
        view = buf.memoryview()
        part = view[10:20]
        view[10:12] = b'ok'
        try:
            buf.free()
        except BufferError as e:
            assert 'memoryviews' in str(e)
        else:
            raise AssertionError('free() with a live view')
        del buf                                  # the views still hold the memory
        assert info()['current'] == 1024
        assert bytes(part[:2]) == b'ok'
        view.release()
        assert info()['current'] == 1024         # the slice is a view too
        del part
        assert info()['current'] == 0
        """)


def test_double_free():
    run("""
        import ctypes, gpumem
        from gpumem import _lib
        buf = gpumem.malloc(512)
        ptr = buf.ptr
        buf.free()
        buf.free()                               # a Buffer frees once; then nothing
        try:
            buf.memoryview()
        except ValueError:
            pass
        else:
            raise AssertionError('a view of freed memory')
        # the raw pointer twice: the C library refuses, the status is raised
        try:
            _lib.lib.gpumem_free(None, ptr)
        except ValueError as e:
            assert isinstance(e, gpumem.errors.InvalidPointerError)
            assert e.status_name == 'GPUMEM_ERR_INVALID_POINTER'
            assert str(e).startswith('gpumem_free('), e
        else:
            raise AssertionError('a double free')
        assert gpumem.config.experimental.get_memory_info('GPU:0')['num_frees'] == 1
        """)


def test_bad_sizes_and_devices():
    run("""
        import gpumem
        def fails(exc, *args, **kw):
            try:
                gpumem.malloc(*args, **kw)
            except exc as e:
                return str(e)
            raise AssertionError((args, kw))
        assert 'nbytes must be > 0' in fails(ValueError, 0)
        assert 'nbytes must be > 0' in fails(ValueError, -1)
        fails(TypeError, True)
        fails(TypeError, 1.5)
        # a wrong type names what the call takes: a logical device here, a
        # physical one for the configuration calls
        wrong = fails(TypeError, 10, device=1.0)
        assert 'LogicalDevice from list_logical_devices()' in wrong, wrong
        assert 'PhysicalDevice whose GPU has one logical device' in wrong, wrong
        try:
            gpumem.config.experimental.set_memory_growth(1.0, True)
        except TypeError as e:
            assert 'PhysicalDevice from list_physical_devices()' in str(e), e
        else:
            raise AssertionError('set_memory_growth(1.0)')
        fails(TypeError, 10, device=object())
        assert 'no such logical device' in fails(ValueError, 10, device='GPU:2')
        assert 'CPU' in fails(ValueError, 10, device='CPU:0')
        fails(MemoryError, 100 << 30, device='GPU:0')
        assert gpumem.malloc(10, device=1).device.name == '/device:GPU:1'
        lds = gpumem.config.list_logical_devices('GPU')
        assert gpumem.malloc(10, device=lds[1]).device == lds[1]
        # past what the C types hold: refused, never cut to the low bits (2**64 + 5
        # bytes were 5, and GPU 2**32 was GPU 0)
        assert 'size_t' in fails(ValueError, 2**64 + 5)
        for dev in (2**32, 2**32 + 1, 'GPU:4294967296', -1):
            assert 'no such logical device' in fails(ValueError, 10, device=dev)
        info = gpumem.config.experimental.get_memory_info
        for call in (lambda: info(2**32), lambda: gpumem.release_unused(2**32 + 1),
                     lambda: gpumem.config.experimental.reset_memory_stats(-1)):
            try:
                call()
            except gpumem.errors.NoSuchDeviceError:
                pass
            else:
                raise AssertionError('an index past a C int')
        # nothing refused was allocated: GPU:0 saw only the out-of-memory
        assert info('GPU:0')['num_allocs'] == 0 and info('GPU:0')['num_ooms'] == 1
        assert info('GPU:1')['num_allocs'] == 2
        """)


def test_many_buffers_round_trip():
    run("""
        import os, gpumem
        bufs = [gpumem.malloc(size, i % 2) for i, size in enumerate(range(1, 5000, 97))]
        datas = []
        for b in bufs:
            data = os.urandom(b.nbytes)
            with b.memoryview() as v:
                v[:] = data
            datas.append(data)
        for b, data in zip(bufs, datas):
            with b.memoryview() as v:
                assert v.tobytes() == data
        ptrs = [b.ptr for b in bufs]
        assert len(set(ptrs)) == len(ptrs)
        del bufs, b
        for i in (0, 1):
            assert gpumem.config.experimental.get_memory_info(i)['current'] == 0
        """)


def test_device_memory_exposes_the_cuda_array_interface():
    # No GPU here: the CUDA backend runs on the driver double, so the buffer is
    # device memory as on a real GPU (not host memory), and offers what CuPy,
    # Numba and PyTorch take instead of a memoryview.
    run("""
        import gpumem
        buf = gpumem.malloc(4096, 'GPU:0')
        cai = buf.__cuda_array_interface__
        assert cai == {'shape': (4096,), 'typestr': '|u1', 'data': (buf.ptr, False),
                       'strides': None, 'version': 3, 'stream': None}, cai
        try:
            buf.memoryview()
        except BufferError as e:
            assert '__cuda_array_interface__' in str(e)
        else:
            raise AssertionError('a host view of device memory')
        buf.free()
        assert not hasattr(buf, '__cuda_array_interface__')
        print(gpumem.config.list_physical_devices('GPU'))
        """, env={"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": driver_double(),
                  "FAKECUDA_DEVICES": "Fake GPU:4GiB:8.0"})


def test_simulated_memory_has_no_cuda_array_interface():
    run("""
        import gpumem
        buf = gpumem.malloc(16, 'GPU:0')
        assert not hasattr(buf, '__cuda_array_interface__')
        with buf.memoryview() as view:
            view[:2] = b'ok'
        buf.free()
        """)
