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

import os

from . import _lib, errors
from .buffer import _host_accessible, malloc

# Physical GPU index -> the first logical device on it; built once the runtime
# is initialized, after which its configuration cannot change.
_first_logical = None


def _logical_for(device_id, api):
    global _first_logical
    if _first_logical is None:
        table = {}
        for d in _lib.list_logical():      # initializes the runtime
            table.setdefault(d.physical_index, d.index)
        _first_logical = table
    if device_id not in _first_logical:
        raise errors.NoSuchDeviceError(
            "%s(): CUDA device %d has no gpumem logical device (no such GPU, or "
            "hidden by set_visible_devices)" % (api, device_id))
    if _host_accessible() and os.environ.get("GPUMEM_BACKEND", "auto") == "auto":
        raise errors.UnsupportedError(
            "%s(): no CUDA driver could be used, so GPUMEM_BACKEND=auto fell back to "
            "simulated GPUs, whose memory is host memory; set GPUMEM_BACKEND=cuda to "
            "see why (or GPUMEM_BACKEND=sim to test on simulated GPUs)" % api)
    return _first_logical[device_id]

__all__ = ["cupy_allocator", "torch_allocator"]


def cupy_allocator(size):
    """Allocates ``size`` bytes for CuPy from the first logical device on the
    current CUDA device; returns a ``cupy.cuda.MemoryPointer``.

    The memory is an ``UnownedMemory`` whose owner is the gpumem Buffer: it is
    freed when CuPy drops its last reference. Raises gpumem's OutOfMemoryError
    (a MemoryError) when the logical device's budget is exhausted.
    """
    import cupy  # only now: importing gpumem never imports CuPy

    device_id = cupy.cuda.Device().id
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
