"""Allocation from Python: ``gpumem.malloc`` and the buffers it returns.

A ``Buffer`` owns one gpumem allocation. It is freed by ``free()``, at the end
of a ``with`` block, or when the last reference to it (and to every
memoryview of it) is gone. It may be shared between threads. It is the
block's only owner, so it is neither copied nor pickled (``TypeError``). An
exception anywhere in ``malloc()`` or in dropping a buffer, a
KeyboardInterrupt between two bytecodes included, leaks nothing.

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
import functools
import operator
import os
import threading
import weakref

from . import _devices, _lib, errors

__all__ = ["Buffer", "malloc"]

_BACKEND_SIM = 2  # gpumem_backend_kind

_NOT_COPIED = (
    "gpumem.Buffer cannot be copied: it owns its block of device memory and frees it "
    "once, and a copy would be a second owner that frees the block again (or whichever "
    "buffer got the address since); for a copy of the contents, gpumem.malloc() a new "
    "buffer and copy into it (through memoryview() on simulated GPUs)")
_NOT_PICKLED = (
    "gpumem.Buffer cannot be pickled: it owns a block of device memory at an address "
    "of this process, which means nothing in another one (and an unpickled copy in this "
    "one would be a second owner that frees the block again); send the contents "
    "(bytes(buf.memoryview()) on simulated GPUs) and gpumem.malloc() a buffer for them "
    "on the other side")


def _host_accessible():
    """True when the default runtime's memory is host memory (simulated GPUs)."""
    kind = ctypes.c_int(0)
    _lib.lib.gpumem_get_backend(None, ctypes.byref(kind))  # raises on failure
    return kind.value == _BACKEND_SIM


# gpumem_free without the status check: a C function called from C, with no
# Python code around it (see _Allocation).
_free_in_c = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(
    ctypes.cast(_lib.lib.gpumem_free, ctypes.c_void_p).value)


class _OwnerRef(weakref.ref):
    """A weak reference to an allocation that passes to C as its pointer."""

    _as_parameter_ = None  # NULL until set: its callback may run before that


# Every allocation's weak reference, held here and not only by the allocation:
# a cyclic collection calls the callback of a weak reference that is not itself
# garbage, and drops it with the allocation otherwise. So the free happens in C
# in a cyclic collection too, where a finalizer (Python code) that freed was
# stopped by a KeyboardInterrupt landing in it (issue 33: 20,000 interrupts
# left blocks allocated). References whose allocation is gone are dropped from
# time to time, by _Allocation(); a callback cannot drop its own (it runs no
# Python code).
_refs = set()
_prune_at = [1024]


def _prune_refs():
    """Drops the references whose allocation is gone (each freed already)."""
    dead = [r for r in list(_refs) if r() is None]
    _refs.difference_update(dead)
    _prune_at[0] = max(1024, 2 * len(_refs))


class _Allocation:
    """The C pointer and its single free; shared by a buffer and its views.

    It exists before the block: gpumem_malloc writes the pointer into ``cptr``,
    which this object owns. When the last reference goes, or a cyclic
    collection takes it, the callback of the weak reference ``ref`` (kept alive
    in ``_refs``, so that a collection calls it) frees what ``cptr`` holds, in
    C: ``gpumem_free(NULL, ref)``, where ctypes reads ``ref._as_parameter_``,
    ``cptr``, when it calls. No Python code runs there for an asynchronous
    exception (KeyboardInterrupt) to land in and stop, as one stopped
    ``__del__`` before its free (nor to report a failed status, which nothing
    here causes). ``__del__`` frees nothing: in a forked child it forgets the
    parent's pointer before the callback runs. ``lock``
    makes a view and the free exclusive; it is reentrant so that a signal
    handler freeing the buffer on a thread inside ``memoryview()`` does not
    deadlock.
    """

    __slots__ = ("lock", "pid", "array", "cptr", "ref", "__weakref__")

    def __init__(self, on_drop=None):
        # on_drop(ref): what frees a dropped block; by default gpumem_free in C.
        self.lock = threading.RLock()
        self.pid = os.getpid()  # a forked child cannot free it (the parent's)
        self.array = None  # weak reference to the ctypes array views are made from
        self.cptr = ctypes.c_void_p()
        if len(_refs) >= _prune_at[0]:
            _prune_refs()
        ref = _OwnerRef(self, on_drop or functools.partial(_free_in_c, None))
        ref._as_parameter_ = self.cptr
        _refs.add(ref)
        self.ref = ref  # last: before it, no C call has written to cptr

    @property
    def ptr(self):
        return self.cptr.value or 0

    def exported(self):
        """True while a view of the block (its ctypes array) is alive."""
        return self.array is not None and self.array() is not None

    def free(self):
        with self.lock:
            ptr = self.cptr.value
            # Marked freed before the C call: an exception landing in between
            # leaks the block, where the other order would free it twice.
            self.cptr.value = None
            if ptr:
                self._free(ptr)

    def _free(self, ptr):
        _lib.lib.gpumem_free(None, ptr)  # raises on any failure status

    def __del__(self):
        # The free is ref's callback's, in C (above). Here, only what a forked
        # child must do: its copy of the pointer is the parent's memory, which
        # it must not free. A dropped object runs this before ref's callback; a
        # cyclic collection runs the callback first, in the child too, where the
        # library refuses the inherited runtime's free. Also runs on an object
        # whose __init__ was interrupted: then there is nothing to forget.
        cptr = getattr(self, "cptr", None)
        if cptr is not None and cptr.value and self.pid != os.getpid():
            cptr.value = None

    # A ctypes array of the block holds its allocation: copying or pickling the
    # array would copy this, a second owner.
    def __copy__(self):
        raise TypeError(_NOT_COPIED)

    def __deepcopy__(self, memo):
        raise TypeError(_NOT_COPIED)

    def __reduce_ex__(self, protocol):
        raise TypeError(_NOT_PICKLED)


class Buffer:
    """``nbytes`` bytes of device memory on logical device ``device``; made by
    ``gpumem.malloc()``.

    Attributes: ``ptr`` (int, 0 once freed), ``nbytes``, ``device`` (a
    LogicalDevice), ``freed`` (bool). Safe to share between threads. Neither
    copied nor pickled (TypeError): it is the block's only owner.
    """

    __slots__ = ("_alloc", "nbytes", "device", "_host", "__weakref__")

    def __init__(self, alloc, nbytes, logical):
        if not isinstance(alloc, _Allocation):
            raise TypeError("gpumem.Buffer is made by gpumem.malloc(), which owns the "
                            "pointer from the moment the C library returns it")
        self._alloc = alloc
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
        ptr = self._alloc.ptr  # once: another thread may free it meanwhile
        if not ptr:
            return "<gpumem.Buffer %d bytes on %s, freed>" % (self.nbytes, self.device.name)
        return "<gpumem.Buffer %d bytes on %s at 0x%x>" % (
            self.nbytes, self.device.name, ptr)

    def __len__(self):
        return self.nbytes

    def __copy__(self):
        raise TypeError(_NOT_COPIED)

    def __deepcopy__(self, memo):
        raise TypeError(_NOT_COPIED)

    def __reduce_ex__(self, protocol):
        raise TypeError(_NOT_PICKLED)

    # ------------------------------------------------------------ freeing --

    def free(self):
        """Gives the memory back to its pool. A second call does nothing.

        Raises BufferError while memoryviews of the buffer are alive (as
        ``bytearray`` refuses to resize while exported), and the exception of
        the C status if gpumem refuses the pointer.
        """
        alloc = self._alloc
        with alloc.lock:  # no view is made meanwhile
            if alloc.ptr and alloc.exported():
                raise BufferError(
                    "gpumem: cannot free %r: memoryviews of it are still alive; release "
                    "them first (memoryview.release(), or `with buf.memoryview() as v:`)"
                    % self)
            alloc.free()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    # -------------------------------------------------------------- views --

    def memoryview(self):
        """A writable memoryview of the bytes (format 'B'); simulated GPUs only.

        The view keeps the memory alive: the buffer is not freed by garbage
        collection while a view exists, and ``free()`` refuses. Raises
        ValueError once the buffer is freed.
        """
        alloc = self._alloc
        with alloc.lock:  # not freed meanwhile (by another thread)
            ptr = alloc.ptr
            if not ptr:
                raise ValueError("gpumem: %r is freed" % self)
            if not self._host:
                raise BufferError(
                    "gpumem: %r is device memory the host cannot read; use "
                    "__cuda_array_interface__ (CuPy, Numba, PyTorch) instead" % self)
            array = alloc.array() if alloc.array is not None else None
            if array is None:
                array = (ctypes.c_ubyte * self.nbytes).from_address(ptr)
                array._gpumem_allocation = alloc  # views keep the memory alive
                alloc.array = weakref.ref(array)
                # The lock is this thread's, so a signal handler running here
                # could have freed the block before the array was registered
                # (after, its free() refuses).
                if alloc.ptr != ptr:
                    raise ValueError("gpumem: %r is freed" % self)
            return memoryview(array).cast("B")

    def __buffer__(self, flags):  # Python 3.12+: memoryview(buf), bytes(buf), ...
        return self.memoryview()

    def __release_buffer__(self, view):
        view.release()

    @property
    def __cuda_array_interface__(self):
        ptr = self._alloc.ptr  # once: another thread may free it meanwhile
        if self._host or not ptr:
            raise AttributeError(
                "__cuda_array_interface__: %r is not CUDA device memory" % self)
        return {
            "shape": (self.nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
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
    # The owner exists before the block, and the C call writes the pointer into
    # it: an exception anywhere from here on (in the status check after the
    # call, in Buffer(), an interrupt between two bytecodes) drops an owner that
    # frees the block.
    alloc = _Allocation()
    _lib.lib.gpumem_malloc(None, logical, nbytes, ctypes.byref(alloc.cptr))
    return Buffer(alloc, nbytes, logical)
