"""gpumem as PyTorch's CUDA allocator, in one call: ``gpumem.torch.use()``.

Imported only when asked for (``import gpumem.torch``); it imports torch only
when ``use()`` is called. Configure gpumem first (growth, limits, logical
devices: ``gpumem.config``), then::

    import gpumem.torch
    gpumem.torch.use()      # before PyTorch allocates anything on the GPU

``use()`` makes gpumem PyTorch's allocator through
``torch.cuda.memory.CUDAPluggableAllocator`` and ``change_current_allocator``:

* The allocator is ``libgpumem_torch.so`` (built beside libgpumem when a C++
  compiler is present; ``cpp/``), whose allocation throws a C++ exception on
  failure. PyTorch turns it into a ``RuntimeError`` whose message starts with
  PyTorch's own words, ``CUDA out of memory.``, and goes on with gpumem's: what
  accelerate's ``find_executable_batch_size`` and Lightning's batch-size finder
  look for. It is a ``RuntimeError``, not ``torch.cuda.OutOfMemoryError``: that
  class is raised from c10's C++ exception type, which only code compiled
  against PyTorch's headers can throw. Without the C++ library, ``use()`` warns
  once and falls back to libgpumem's C pair, whose failure PyTorch cannot see (a
  NULL tensor; gpumem prints the reason).
* PyTorch passes its stream with each call. libgpumem_torch.so hands it to
  gpumem's stream-ordered allocation (gpumem_malloc_async, gpumem_free_async):
  a block freed on a stream goes to another stream only once the work queued
  before the free has run (see docs/python.md).
* PyTorch's pluggable allocator has no statistics (``memory_allocated`` and the
  rest raise "CUDAPluggableAllocator does not yet support getDeviceStats") and
  its ``empty_cache`` does nothing. ``use()`` replaces these functions in
  ``torch.cuda.memory`` and ``torch.cuda`` (the same functions, re-exported) by
  ones that report gpumem's figures for the CUDA device asked (its first
  logical device) and give unused memory back: see ``PATCHED``.
  ``restore()`` puts PyTorch's functions back. A name imported before ``use()``
  (``from torch.cuda import reset_peak_memory_stats``) is still PyTorch's: call
  it through the module (``torch.cuda.reset_peak_memory_stats()``). PyTorch's
  ``memory_allocated``, ``memory_reserved`` and their ``max_`` twins read
  ``memory_stats`` from their module, and its ``memory_stats`` reads
  ``memory_stats_as_nested_dict``, so even early imports of these report
  gpumem's figures; ``reset_peak_memory_stats``, ``reset_accumulated_memory_stats``,
  ``empty_cache`` and ``memory_summary`` imported early do not.

PyTorch cannot change its allocator back once one has been used (a pluggable
allocator counts as used from its creation): after ``restore()`` allocation
stays with gpumem, only the Python functions are PyTorch's again, and a later
``use()`` patches them anew without making another allocator.
"""

import collections
import ctypes
import os
import threading
import warnings

from . import _lib, hooks

__all__ = ["PATCHED", "library_path", "raises_on_oom", "restore", "use"]

SHIM = "libgpumem_torch.so"
_SHIM_FUNCTIONS = ("gpumem_torch_alloc_or_throw", "gpumem_torch_free_stream")
_C_FUNCTIONS = ("gpumem_torch_malloc", "gpumem_torch_free")  # libgpumem's, never raise

#: The functions use() replaces, in torch.cuda.memory and in torch.cuda.
PATCHED = (
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_peak_memory_stats",
    "reset_accumulated_memory_stats",
    "memory_summary",
    "empty_cache",
)

#: The file PyTorch's allocator was loaded from (None before use()).
library_path = None
#: True when out of memory raises (libgpumem_torch.so), False when PyTorch gets
#: NULL (libgpumem's C pair); None before use().
raises_on_oom = None

_lock = threading.Lock()
_allocator = None  # the CUDAPluggableAllocator made current; PyTorch keeps it
_saved = None      # {(module, name): PyTorch's function} while patched
_counts = {}       # logical device -> _Counts


# ------------------------------------------------------------- the library --


def shim_candidates():
    """(where, path) to look for libgpumem_torch.so, beside the libgpumem the
    package loaded: in the same folder (an install: both go to libdir; a copy
    beside the package), then the Meson build folder's cpp/ (the library is in
    build/lib). None when the library was found by a bare name."""
    if os.sep not in _lib.path:
        return []
    libdir = os.path.dirname(os.path.abspath(_lib.path))
    return [("beside libgpumem", os.path.join(libdir, SHIM)),
            ("Meson build folder", os.path.join(os.path.dirname(libdir), "cpp", SHIM))]


def find_shim():
    """(path, tried): the first libgpumem_torch.so that loads and has both
    functions, or None; `tried` says why each place was passed over."""
    tried = []
    for where, path in shim_candidates():
        if not os.path.exists(path):
            tried.append("%s: %s: not found" % (where, path))
            continue
        try:
            so = ctypes.CDLL(path)
            for name in _SHIM_FUNCTIONS:
                getattr(so, name)
        except (OSError, AttributeError) as e:
            tried.append("%s: %s: %s" % (where, path, e))
            continue
        return path, tried
    if not tried:
        tried.append("libgpumem was loaded by name (%s), so there is no folder to look in"
                     % _lib.path)
    return None, tried


# ------------------------------------------------------------ use, restore --


def use():
    """Makes gpumem PyTorch's CUDA allocator and patches the statistics
    functions (see the module's documentation); returns the
    CUDAPluggableAllocator. A second call changes nothing; after restore() it
    patches the functions again.

    Raises RuntimeError when PyTorch has already allocated on the GPU (it
    cannot change an allocator in use): call it first."""
    global _allocator, library_path, raises_on_oom
    import torch

    with _lock:
        if _allocator is None:
            path, tried = find_shim()
            names = _SHIM_FUNCTIONS
            if path is None:
                warnings.warn(
                    "gpumem.torch.use(): %s not found (%s), so out of memory cannot "
                    "raise: PyTorch gets libgpumem's gpumem_torch_malloc, whose failure "
                    "it sees as a NULL tensor (gpumem prints the reason). Build gpumem "
                    "with a C++ compiler to have %s." % (SHIM, "; ".join(tried), SHIM),
                    RuntimeWarning, stacklevel=2)
                path, names = _lib.path, _C_FUNCTIONS
            allocator = torch.cuda.memory.CUDAPluggableAllocator(path, *names)
            try:
                torch.cuda.memory.change_current_allocator(allocator)
            except RuntimeError as e:
                raise RuntimeError(
                    "gpumem.torch.use(): PyTorch refuses to change its allocator (%s): "
                    "it cannot once it has allocated on the GPU, or once another "
                    "allocator was made current. Call gpumem.torch.use() before the "
                    "first CUDA tensor." % e) from None
            _allocator = allocator
            library_path = path
            raises_on_oom = names == _SHIM_FUNCTIONS
        if _saved is None:
            _patch(torch)
        return _allocator


def restore():
    """Puts back PyTorch's functions that use() replaced (where they are still
    gpumem's). The allocator stays gpumem (PyTorch cannot change it back)."""
    global _saved
    with _lock:
        if _saved is None:
            return
        ours = _functions()
        for (module, name), original in _saved.items():
            if getattr(module, name, None) is ours[name]:
                setattr(module, name, original)
        _saved = None


def _patch(torch):
    global _saved
    saved = {}
    ours = _functions()
    for module in (torch.cuda.memory, torch.cuda):
        for name in PATCHED:
            if hasattr(module, name):
                saved[(module, name)] = getattr(module, name)
                setattr(module, name, ours[name])
    _saved = saved


def _functions():
    return {name: globals()[name] for name in PATCHED}


def _original(name):
    """PyTorch's torch.cuda.memory.<name> while patched, else None."""
    for (module, patched), fn in (_saved or {}).items():
        if patched == name and module.__name__ == "torch.cuda.memory":
            return fn
    return None


# ------------------------------------------------------------- the figures --


class _Counts:
    """Counters of one logical device kept across resets: gpumem's reset zeroes
    the allocation and OOM counters with the peaks, PyTorch's
    reset_peak_memory_stats only the peaks. The driver's counters never reset:
    PyTorch's reset_accumulated_memory_stats zeroes num_device_alloc and
    num_device_free, so their figures at that reset are kept here."""

    __slots__ = ("carried", "zero", "device_zero")

    def __init__(self):
        self.carried = (0, 0, 0)  # (allocs, frees, ooms) gpumem zeroed at our resets
        self.zero = (0, 0, 0)     # totals at the last reset_accumulated_memory_stats
        self.device_zero = (0, 0)  # (device allocs, device frees) then


def _device(device, api):
    """(CUDA device index, gpumem logical device) for a PyTorch device
    argument (None: the current device)."""
    import torch

    index = torch.cuda._get_device_index(device, optional=True)
    return index, hooks._logical_for(index, api)


def _info(logical):
    info = _lib.MemoryInfoStruct()
    _lib.lib.gpumem_get_memory_info(None, logical, ctypes.byref(info))
    return info


def _totals(logical, info):
    c = _counts.setdefault(logical, _Counts())
    now = (info.num_allocs, info.num_frees, info.num_ooms)
    return tuple(a + b for a, b in zip(c.carried, now)), c


#: The driver's entry points that PyTorch's num_device_alloc and
#: num_device_free count: memory taken from the device (a plain allocation, or
#: physical memory for a mapping) and given back (a free, an unmap).
DEVICE_ALLOC_CALLS = ("cuMemAlloc_v2", "cuMemCreate")
DEVICE_FREE_CALLS = ("cuMemFree_v2", "cuMemUnmap")


def _device_calls(index):
    """(allocation calls, free calls) the driver was asked on CUDA device
    `index` (gpumem's physical GPU of that index) since gpumem started."""
    calls = _lib.driver_calls(index)
    return (sum(calls[name]["calls"] for name in DEVICE_ALLOC_CALLS),
            sum(calls[name]["calls"] for name in DEVICE_FREE_CALLS))


def memory_stats_as_nested_dict(device=None):
    """gpumem's figures for CUDA device `device` under PyTorch's key names:
    ``allocated_bytes.all.{current,peak}`` (bytes in live allocations, gpumem's
    256-byte granules), ``reserved_bytes.all.{current,peak}`` (taken from the
    GPU), ``allocation.all.{current,allocated,freed}`` (live allocations; those
    made and freed since the last reset_accumulated_memory_stats), ``num_ooms``,
    ``num_device_alloc`` and ``num_device_free`` (the CUDA driver calls that took
    memory from this GPU, cuMemAlloc_v2 and cuMemCreate, and that gave it back,
    cuMemFree_v2 and cuMemUnmap, for every logical device on it, since the last
    reset_accumulated_memory_stats), and gpumem's own
    ``gpumem.{limit_bytes,largest_free_block}``. What gpumem
    does not count is absent (PyTorch's small/large pools, segments,
    ``num_alloc_retries``). Empty before gpumem is initialized, as PyTorch's is
    before CUDA is."""
    if not _lib.is_initialized():
        return {}
    index, logical = _device(device, "memory_stats")
    info = _info(logical)
    device_allocs, device_frees = _device_calls(index)
    with _lock:
        (allocs, frees, ooms), c = _totals(logical, info)
        zero, device_zero = c.zero, c.device_zero
    return {
        "allocated_bytes": {"all": {"current": info.current_bytes, "peak": info.peak_bytes}},
        "reserved_bytes": {"all": {"current": info.reserved_bytes,
                                   "peak": info.peak_reserved_bytes}},
        "allocation": {"all": {"current": allocs - frees, "allocated": allocs - zero[0],
                               "freed": frees - zero[1]}},
        "num_ooms": ooms - zero[2],
        "num_device_alloc": device_allocs - device_zero[0],
        "num_device_free": device_frees - device_zero[1],
        "gpumem": {"limit_bytes": info.limit_bytes,
                   "largest_free_block": info.largest_free_block},
    }


def memory_stats(device=None):
    """memory_stats_as_nested_dict flattened to dotted keys, sorted (as
    PyTorch's)."""
    flat = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, sub in value.items():
                walk(prefix + "." + key if prefix else key, sub)
        else:
            flat.append((prefix, value))

    walk("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def memory_allocated(device=None):
    """Bytes in live allocations on CUDA device `device` (gpumem's pool)."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    """The peak of memory_allocated since start or reset_peak_memory_stats."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    """Bytes gpumem's pool has taken from the GPU (in use plus cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    """The peak of memory_reserved since start or reset_peak_memory_stats."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Peaks start again from the current figures (gpumem_reset_memory_stats);
    the allocation counters go on (gpumem zeroes them: they are carried here)."""
    if not _lib.is_initialized():
        return
    _, logical = _device(device, "reset_peak_memory_stats")
    with _lock:
        # An allocation between the read and the reset is not counted: the
        # counters are figures for people, the peaks are exact.
        info = _info(logical)
        totals, c = _totals(logical, info)
        _lib.lib.gpumem_reset_memory_stats(None, logical)
        c.carried = totals


def reset_accumulated_memory_stats(device=None):
    """``allocation.all.allocated``/``freed``, ``num_ooms``, ``num_device_alloc``
    and ``num_device_free`` start again from 0."""
    if not _lib.is_initialized():
        return
    index, logical = _device(device, "reset_accumulated_memory_stats")
    with _lock:
        totals, c = _totals(logical, _info(logical))
        c.zero = totals
        c.device_zero = _device_calls(index)


def empty_cache():
    """Gives every wholly free region of every logical device back to the GPU
    (gpumem_release_unused), after PyTorch's own empty_cache (which does nothing
    for a pluggable allocator). With growth off a pool is one region, which goes
    back only when nothing in it is live."""
    original = _original("empty_cache")
    if original is not None:
        original()
    if _lib.is_initialized():
        released = ctypes.c_uint64()
        _lib.lib.gpumem_release_unused(None, -1, ctypes.byref(released))


def _size(n):
    """Bytes as gpumem's messages write them: "512 B", "10.50 GiB"."""
    if n < 1024:
        return "%d B" % n
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024.0
        if n < 1024 or unit == "PiB":
            return "%.2f %s" % (n, unit)


def memory_summary(device=None, abbreviated=False):
    """A table of gpumem's figures for CUDA device `device`, in the shape of
    PyTorch's summary. `abbreviated` is accepted for PyTorch's signature (gpumem
    has no small and large pools to break the figures into)."""
    del abbreviated
    import torch

    index = torch.cuda._get_device_index(device, optional=True)
    stats = memory_stats(index)
    width = 75
    rule, double = "-" * width, "=" * width
    lines = [double,
             " gpumem memory summary (PyTorch's allocator), CUDA device %d" % index,
             rule]
    if not stats:
        lines += [" gpumem is not initialized yet: nothing is allocated or reserved.",
                  double]
        return "".join("|%-*s|\n" % (width, line) for line in lines)
    _, logical = _device(index, "memory_summary")
    lines += [" gpumem logical device /device:GPU:%d: budget %s" % (
                  logical, _size(stats["gpumem.limit_bytes"])),
              " largest request served without growing: %s" % _size(
                  stats["gpumem.largest_free_block"]),
              " CUDA OOMs: %-8d | retries after giving memory back: not counted"
              % stats["num_ooms"],
              " driver allocations: %-8d | driver frees: %d" % (
                  stats["num_device_alloc"], stats["num_device_free"]),
              double,
              " %-21s | %-10s | %-10s | %-10s | %-10s" % (
                  "Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")]
    rows = [
        ("Allocated memory", _size(stats["allocated_bytes.all.current"]),
         _size(stats["allocated_bytes.all.peak"]), "-", "-"),
        ("GPU reserved memory", _size(stats["reserved_bytes.all.current"]),
         _size(stats["reserved_bytes.all.peak"]), "-", "-"),
        ("Allocations", str(stats["allocation.all.current"]), "-",
         str(stats["allocation.all.allocated"]), str(stats["allocation.all.freed"])),
    ]
    for row in rows:
        lines.append(rule)
        lines.append(" %-21s | %10s | %10s | %10s | %10s" % row)
    lines.append(double)
    return "".join("|%-*s|\n" % (width, line) for line in lines)
