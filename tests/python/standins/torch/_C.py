"""Stand-in for the C++ side of PyTorch's CUDA allocators (torch/csrc/cuda/
CUDAPluggableAllocator.cpp, c10/cuda/CUDACachingAllocator).

* The current allocator is the native one until changeCurrentAllocator; a
  change is refused once the current allocator is initialized ("Can't swap an
  already initialized allocator"): the native one is at CUDA's lazy
  initialization, a pluggable one from its creation.
* A pluggable allocator calls alloc(size, device, stream) and records
  (size, device, stream) for the pointer, whatever it is (NULL included: PyTorch
  does not check); the free gets them back. A C++ exception thrown by alloc
  becomes a RuntimeError with its what() where the operator returns to Python:
  here through libtorch_boundary.so (tests/cpp/torch_boundary.cc), named by
  TORCH_STANDIN_BOUNDARY, since ctypes cannot catch one. Without it the
  function is called through ctypes (fine for functions that never throw).
* Its statistics, its history and its snapshot raise as PyTorch's do;
  emptyCache calls no reset function, so it does nothing.
* Its allocator object (``CUDAPluggableAllocator(...).allocator()``) has none
  of the hook setters (``set_record_stream_fn``, the graph-pool ones...): it
  models a PyTorch without them; the real PyTorch's are tested in
  tests/python/test_torch_real.py.
"""

import ctypes
import os

_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                         ctypes.c_void_p)


def _unsupported(what):
    raise RuntimeError("CUDAPluggableAllocator does not yet support %s. If you need it, "
                       "please file an issue describing your use case." % what)


class _NativeAllocator:
    def __init__(self):
        self.initialized = False

    def init(self, device_count):
        self.initialized = True

    def malloc(self, size, device, stream):
        raise RuntimeError("stand-in torch: the native caching allocator is not modelled")

    def getDeviceStats(self, device):
        return {}

    def resetPeakStats(self, device):
        pass

    def resetAccumulatedStats(self, device):
        pass

    def emptyCache(self):
        pass

    def recordHistory(self, enabled):
        pass

    def snapshot(self):
        return {"segments": [], "device_traces": []}


class _PluggableAllocator:
    def __init__(self, alloc_fn, free_fn):
        self.alloc_address = alloc_fn
        self.free_fn = _FREE(free_fn)
        self.metadata = {}
        self.initialized = True  # PyTorch calls init() as it creates it

    def init(self, device_count):
        pass

    def malloc(self, size, device, stream):
        ptr = _call_alloc(self.alloc_address, size, device, stream)
        self.metadata[ptr] = (size, device, stream)
        return ptr

    def raw_delete(self, ptr):
        if ptr not in self.metadata:
            raise RuntimeError("Trying to free a pointer not allocated here")
        size, device, stream = self.metadata.pop(ptr)
        self.free_fn(ptr, size, device, stream)

    def getDeviceStats(self, device):
        _unsupported("getDeviceStats")

    def resetPeakStats(self, device):
        _unsupported("resetPeakStats")

    def resetAccumulatedStats(self, device):
        _unsupported("resetAccumulatedStats")

    def emptyCache(self):
        pass  # no reset function was given

    def recordHistory(self, enabled):
        _unsupported("recordHistory")

    def snapshot(self):
        _unsupported("snapshot")


def _call_alloc(address, size, device, stream):
    path = os.environ.get("TORCH_STANDIN_BOUNDARY")
    if not path:
        return _ALLOC(address)(size, device, stream)
    boundary = ctypes.CDLL(path)
    call = boundary.torch_boundary_alloc
    call.restype = ctypes.c_int
    call.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p,
                     ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p, ctypes.c_size_t]
    out = ctypes.c_void_p()
    what = ctypes.create_string_buffer(4096)
    status = call(address, size, device, stream, ctypes.byref(out), what, len(what))
    if status == 1:
        raise RuntimeError(what.value.decode("utf-8", "replace"))
    if status != 0:
        raise RuntimeError("Unknown exception")
    return out.value


_current = _NativeAllocator()


def _current_allocator():
    return _current


def _cuda_customAllocator(alloc_fn, free_fn):
    return _PluggableAllocator(alloc_fn, free_fn)


def _cuda_changeCurrentAllocator(allocator):
    global _current
    if _current.initialized:
        raise RuntimeError("Can't swap an already initialized allocator")
    _current = allocator


def _cuda_memoryStats(device):
    return _current.getDeviceStats(device)


def _cuda_resetPeakMemoryStats(device):
    _current.resetPeakStats(device)


def _cuda_resetAccumulatedMemoryStats(device):
    _current.resetAccumulatedStats(device)


def _cuda_emptyCache():
    _current.emptyCache()


def _cuda_record_memory_history(enabled):
    _current.recordHistory(enabled)


def _cuda_memorySnapshot():
    return _current.snapshot()
