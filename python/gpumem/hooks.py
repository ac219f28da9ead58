"""Hooks for frameworks that accept a foreign allocator.

* CuPy: ``cupy.cuda.set_allocator(gpumem.cupy_allocator)``. CuPy documents an
  allocator as a function with the interface of ``cupy.cuda.alloc``: it takes
  the size in bytes and returns a ``cupy.cuda.MemoryPointer``. This one
  imports CuPy only when called.
* PyTorch: ``torch.cuda.memory.change_current_allocator(gpumem.torch_allocator())``
  loads the C pair ``gpumem_torch_malloc`` / ``gpumem_torch_free`` from
  libgpumem.so (see include/gpumem.h, "framework hooks").

Both take the framework's CUDA device index as gpumem's physical GPU index (the
driver's ordinal, as CUDA and the frameworks number GPUs) and allocate from the
first logical device on that GPU.
"""

import ctypes

from . import _lib, errors
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


def cupy_allocator(size):
    """Allocates ``size`` bytes for CuPy from the first logical device on the
    current CUDA device; returns a ``cupy.cuda.MemoryPointer``.

    The memory is an ``UnownedMemory`` whose owner is the gpumem Buffer: it is
    freed when CuPy drops its last reference. Raises gpumem's OutOfMemoryError
    (a MemoryError) when the logical device's budget is exhausted.
    """
    import cupy  # only now: importing gpumem never imports CuPy

    device_id = cupy.cuda.Device().id
    if size < 0:
        raise errors.InvalidArgumentError(
            "cupy_allocator(): size must be >= 0, not %d" % size)
    if size == 0:
        memory = cupy.cuda.UnownedMemory(0, 0, None, device_id)
        return cupy.cuda.MemoryPointer(memory, 0)
    buf = malloc(size, device=_logical_for(device_id, "cupy_allocator"))
    memory = cupy.cuda.UnownedMemory(buf.ptr, size, buf, device_id)
    return cupy.cuda.MemoryPointer(memory, 0)


def torch_allocator():
    """A ``torch.cuda.memory.CUDAPluggableAllocator`` over the loaded
    libgpumem.so's ``gpumem_torch_malloc`` and ``gpumem_torch_free``.

    Pass it to ``torch.cuda.memory.change_current_allocator`` before PyTorch
    allocates anything on the GPU. Imports torch only when called.
    """
    import torch

    return torch.cuda.memory.CUDAPluggableAllocator(
        _lib.path, "gpumem_torch_malloc", "gpumem_torch_free")
