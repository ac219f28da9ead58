"""Allocation from Python: ``gpumem.malloc`` and the buffers it returns.

A ``Buffer`` owns one gpumem allocation. It is freed by ``free()``, at the end
of a ``with`` block, or when the last reference to it (and to every
memoryview of it) is gone.

What a buffer exposes depends on whether the host can touch the memory:

* Simulated GPUs (host memory): the buffer protocol through
  ``buf.memoryview()`` (and ``memoryview(buf)`` on Python 3.12+), so it can be
  filled and read. ``free()`` refuses, with ``BufferError``, while a memoryview
  of the buffer is alive (as ``mmap.close()`` does): release views first, e.g.
  ``with buf.memoryview() as view: ...``.
* CUDA devices: ``__cuda_array_interface__`` (version 3; a one-dimensional
  ``uint8`` array of ``nbytes``), so CuPy, Numba and PyTorch can wrap it
  without a copy. They must keep the buffer alive while they use it.

Which of the two it is comes from the C library (``gpumem_get_backend``: the
simulated backend's memory is host memory, CUDA's is not).
"""

import ctypes
import operator
import os
import sys
import warnings
import weakref

from . import _devices, _lib, errors

__all__ = ["Buffer", "malloc"]

_BACKEND_SIM = 2  # gpumem_backend_kind


def _host_accessible():
    """True when the default runtime's memory is host memory (simulated GPUs)."""
    kind = ctypes.c_int(0)
    _lib.lib.gpumem_get_backend(None, ctypes.byref(kind))  # raises on failure
    return kind.value == _BACKEND_SIM


class _Allocation:
    """The C pointer and its single free; shared by a buffer and its views."""

    __slots__ = ("ptr", "pid", "__weakref__")

    def __init__(self, ptr):
        self.ptr = ptr
        self.pid = os.getpid()  # a forked child cannot free it (the parent's)

    def free(self):
        ptr, self.ptr = self.ptr, 0
        if ptr:
            _lib.lib.gpumem_free(None, ptr)  # raises on any failure status

    def __del__(self):
        if not self.ptr or sys.is_finalizing():
            return  # at interpreter exit the runtime gives everything back
        if self.pid != os.getpid():
            return  # inherited across fork(): the memory is the parent's
        try:
            self.free()
        except Exception as e:  # noqa: BLE001 - report, never raise from __del__
            warnings.warn("gpumem: freeing a collected buffer failed: %s" % e,
                          ResourceWarning, stacklevel=2)


class Buffer:
    """``nbytes`` bytes of device memory on logical device ``device``.

    Attributes: ``ptr`` (int, 0 once freed), ``nbytes``, ``device`` (a
    LogicalDevice), ``freed`` (bool).
    """

    __slots__ = ("_alloc", "_array", "nbytes", "device", "_host", "__weakref__")

    def __init__(self, ptr, nbytes, logical):
        self._alloc = _Allocation(ptr)
        self._array = None  # weak reference to the ctypes array views are made from
        self.nbytes = nbytes
        self.device = _devices.LogicalDevice(name="/device:GPU:%d" % logical,
                                             device_type="GPU")
        self._host = _host_accessible()

    @property
    def ptr(self):
        return self._alloc.ptr

    @property
    def freed(self):
        return not self._alloc.ptr

    def __repr__(self):
        if self.freed:
            return "<gpumem.Buffer %d bytes on %s, freed>" % (self.nbytes, self.device.name)
        return "<gpumem.Buffer %d bytes on %s at 0x%x>" % (
            self.nbytes, self.device.name, self.ptr)

    def __len__(self):
        return self.nbytes

    # ------------------------------------------------------------ freeing --

    def _views_alive(self):
        return self._array is not None and self._array() is not None

    def free(self):
        """Gives the memory back to its pool. A second call does nothing.

        Raises BufferError while memoryviews of the buffer are alive, and the
        exception of the C status if gpumem refuses the pointer.
        """
        if self.freed:
            return
        if self._views_alive():
            raise BufferError(
                "gpumem: cannot free %r: memoryviews of it are still alive; release "
                "them first (memoryview.release(), or `with buf.memoryview() as v:`)"
                % self)
        self._alloc.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    # -------------------------------------------------------------- views --

    def memoryview(self):
        """A writable memoryview of the bytes (format 'B'); simulated GPUs only.

        The view keeps the memory alive: the buffer is not freed by garbage
        collection while a view exists, and ``free()`` refuses.
        """
        if self.freed:
            raise ValueError("gpumem: %r is freed" % self)
        if not self._host:
            raise BufferError(
                "gpumem: %r is device memory the host cannot read; use "
                "__cuda_array_interface__ (CuPy, Numba, PyTorch) instead" % self)
        array = self._array() if self._array is not None else None
        if array is None:
            array = (ctypes.c_ubyte * self.nbytes).from_address(self.ptr)
            array._gpumem_allocation = self._alloc  # views keep the memory alive
            self._array = weakref.ref(array)
        return memoryview(array).cast("B")

    def __buffer__(self, flags):  # Python 3.12+: memoryview(buf), bytes(buf), ...
        return self.memoryview()

    def __release_buffer__(self, view):
        view.release()

    @property
    def __cuda_array_interface__(self):
        if self._host or self.freed:
            raise AttributeError(
                "__cuda_array_interface__: %r is not CUDA device memory" % self)
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (self.ptr, False),
            "strides": None,
            "version": 3,
            "stream": None,  # gpumem orders nothing by stream
        }


def malloc(nbytes, device="GPU:0"):
    """Allocates ``nbytes`` (> 0) on a logical GPU; returns a Buffer.

    ``device``: a LogicalDevice, a name ('GPU:0', '/device:GPU:1'), or a
    logical index. Initializes the devices. Raises ValueError for a bad size or
    device, MemoryError (``gpumem.errors.OutOfMemoryError``) when the device's
    budget is exhausted.
    """
    if isinstance(nbytes, bool):
        raise TypeError("malloc(): nbytes must be an int, not bool")
    nbytes = operator.index(nbytes)
    if nbytes <= 0:
        raise errors.InvalidArgumentError(
            "malloc(): nbytes must be > 0, not %d" % nbytes)
    if nbytes >= 2**(8 * ctypes.sizeof(ctypes.c_size_t)):  # ctypes would cut it
        raise errors.InvalidArgumentError(
            "malloc(): nbytes %d is more than a size_t holds" % nbytes)
    kind, logical = _devices.resolve_logical(device, "malloc")
    if kind != "GPU":
        raise errors.InvalidArgumentError(
            "malloc(): gpumem allocates GPU memory; %r is a CPU" % (device,))
    ptr = ctypes.c_void_p()
    _lib.lib.gpumem_malloc(None, logical, nbytes, ctypes.byref(ptr))
    return Buffer(ptr.value, nbytes, logical)
