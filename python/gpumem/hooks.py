"""Hooks for frameworks that accept a foreign allocator.

* CuPy: ``cupy.cuda.set_allocator(gpumem.cupy_allocator)``. CuPy documents an
  allocator as a function with the interface of ``cupy.cuda.alloc``: it takes
  the size in bytes and returns a ``cupy.cuda.MemoryPointer``. This one
  imports CuPy only when called, allocates on CuPy's current stream when the
  library has the stream-ordered API (``gpumem_malloc_async``), and raises
  CuPy's own ``cupy.cuda.memory.OutOfMemoryError`` on out of memory.
* PyTorch: ``gpumem.torch.use()`` (the module ``gpumem.torch``) in one call.
  ``torch_allocator()`` is the lower-level pair ``gpumem_torch_malloc`` /
  ``gpumem_torch_free`` of libgpumem.so (see include/gpumem.h, "framework
  hooks"), whose failures PyTorch cannot see.

Both take the framework's CUDA device index as gpumem's physical index (the
driver's ordinal, as CUDA and the frameworks number GPUs) and allocate from the
first logical device on that GPU.
"""

import ctypes
import functools

from . import _lib, buffer, errors
from .buffer import malloc

__all__ = ["cupy_allocator", "torch_allocator"]


def _logical_for(device_id, api):
    """gpumem's logical device for CUDA device `device_id`: the first logical
    device on that GPU (C's gpumem_cuda_device_logical, which also refuses the
    simulated memory GPUMEM_BACKEND=auto falls back to)."""
    logical = ctypes.c_int(-1)
    try:
        _lib.lib.gpumem_cuda_device_logical(None, device_id, ctypes.byref(logical))
    except errors.GpumemError as e:
        raise type(e)("%s(): %s" % (api, e), e.status, e.status_name) from None
    return logical.value


class _StreamAllocation(buffer._Allocation):
    """An allocation of the stream-ordered API: freed on the stream it was
    allocated on, which gpumem may hand out again at once on that stream and on
    another only once the work queued before the free has run. Made before the
    block, as every allocation (buffer._Allocation): the C call writes the
    pointer into it."""

    __slots__ = ("stream",)

    def __init__(self, stream):
        self.stream = stream
        super().__init__(on_drop=functools.partial(_drop_on_stream, stream))

    def _free(self, ptr):
        _stream_api()[1](ptr, self.stream)


def _drop_on_stream(stream, ref):
    """The weak reference's callback of a dropped stream-ordered allocation.
    Unlike a plain allocation's, it runs a few lines of Python (the free needs
    the stream after the pointer, which a C callback bound in advance cannot
    take); nothing else runs in between."""
    ptr = ref._as_parameter_.value
    if ptr:
        ref._as_parameter_.value = None
        _stream_api()[1](ptr, stream)


def _stream_api():
    """(malloc, free) of the library's stream-ordered API as Python callables,
    ``malloc(logical, size, stream, out)`` (the pointer into the c_void_p
    ``out``) and ``free(ptr, stream)``, or None
    when the loaded library has none (gpumem_malloc_async, gpumem_free_async)."""
    lib = _lib.lib
    try:
        c_malloc, c_free = lib.gpumem_malloc_async, lib.gpumem_free_async
    except AttributeError:
        return None
    if c_malloc.argtypes is None:  # not declared by _lib: declare it here
        c_malloc.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                             ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        c_malloc.restype = ctypes.c_int
        c_malloc.errcheck = _lib._errcheck
    if c_free.argtypes is None:
        c_free.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        c_free.restype = ctypes.c_int
        c_free.errcheck = _lib._errcheck

    def stream_malloc(logical, size, stream, out):
        c_malloc(None, logical, size, stream, ctypes.byref(out))

    def stream_free(ptr, stream):
        c_free(None, ptr, stream)

    return stream_malloc, stream_free


def _cupy_out_of_memory(cupy, size, logical, error):
    """CuPy's own OutOfMemoryError (its constructor's size, bytes allocated so
    far and limit: the logical device's), its message followed by gpumem's."""
    info = _lib.MemoryInfoStruct()
    try:
        _lib.lib.gpumem_get_memory_info(None, logical, ctypes.byref(info))
    except errors.GpumemError:
        pass  # the figures are zero; gpumem's message still says why
    oom = cupy.cuda.memory.OutOfMemoryError(size, info.current_bytes, info.limit_bytes)
    oom.args = ("%s gpumem: %s" % (oom.args[0] if oom.args else "", error),)
    return oom


def cupy_allocator(size):
    """Allocates ``size`` bytes for CuPy from the first logical device on the
    current CUDA device, on CuPy's current stream; returns a
    ``cupy.cuda.MemoryPointer``.

    The memory is an ``UnownedMemory`` whose owner frees it when CuPy drops its
    last reference: a gpumem Buffer, or with the stream-ordered API an owner
    that frees it on the stream it was allocated on (as CuPy's own pool does).
    Without that API gpumem orders nothing by stream (see
    gpumem_torch_malloc's note in gpumem.h). Raises
    ``cupy.cuda.memory.OutOfMemoryError`` (a MemoryError) when the logical
    device's budget is exhausted, with gpumem's reason after CuPy's sentence.
    """
    import cupy  # only now: importing gpumem never imports CuPy

    device_id = cupy.cuda.Device().id
    if size < 0:
        raise errors.InvalidArgumentError(
            "cupy_allocator(): size must be >= 0, not %d" % size)
    if size == 0:
        memory = cupy.cuda.UnownedMemory(0, 0, None, device_id)
        return cupy.cuda.MemoryPointer(memory, 0)
    logical = _logical_for(device_id, "cupy_allocator")
    api = _stream_api()
    try:
        if api is None:
            owner = malloc(size, device=logical)
            ptr = owner.ptr
        else:
            stream = cupy.cuda.get_current_stream().ptr
            owner = _StreamAllocation(stream)
            api[0](logical, size, stream, owner.cptr)
            ptr = owner.ptr
    except errors.OutOfMemoryError as e:
        raise _cupy_out_of_memory(cupy, size, logical, e) from e
    memory = cupy.cuda.UnownedMemory(ptr, size, owner, device_id)
    return cupy.cuda.MemoryPointer(memory, 0)


def torch_allocator():
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` over the loaded
    libgpumem.so's ``gpumem_torch_malloc`` and ``gpumem_torch_free``, which
    return NULL on failure (PyTorch does not check). ``gpumem.torch.use()`` is
    the whole thing: out of memory raised, and PyTorch's statistics.

    Pass it to ``torch.cuda.memory.change_current_allocator`` before PyTorch
    allocates anything on the GPU. Imports torch only when called.
    """
    import torch

    return torch.cuda.memory.CUDAPluggableAllocator(
        _lib.path, "gpumem_torch_malloc", "gpumem_torch_free")
