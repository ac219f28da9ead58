"""gpumem as PyTorch's CUDA allocator, in one call: ``gpumem.torch.use()``.

Imported only when asked for (``import gpumem.torch``); it imports torch only
when ``use()`` is called. Configure gpumem first (growth, limits, logical
devices: ``gpumem.config``), then::

    import gpumem.torch
    gpumem.torch.use()      # before PyTorch allocates anything on the GPU

``use()`` makes gpumem PyTorch's allocator through
``torch.cuda.memory.CUDAPluggableAllocator`` and ``change_current_allocator``:

* The allocator is the best of three libraries found beside libgpumem:
  ``libgpumem_torch_c10.so`` (built where python3 imports PyTorch with its C++
  headers, against that PyTorch, and used only under that version), whose out of
  memory is ``c10::OutOfMemoryError``, which PyTorch raises as
  ``torch.cuda.OutOfMemoryError`` (a ``RuntimeError`` too); else
  ``libgpumem_torch.so`` (built with any C++ compiler; ``cpp/``), whose out of
  memory is a ``RuntimeError``; both messages start with PyTorch's own words,
  ``CUDA out of memory.``, and go on with gpumem's (what accelerate's
  ``find_executable_batch_size`` and Lightning's batch-size finder look for).
  Else libgpumem's C pair, whose failure PyTorch cannot see (a NULL tensor;
  gpumem prints the reason).
* PyTorch's allocator object takes further hooks by address (``HOOKS``), each
  given where this PyTorch has its setter and gpumem the function
  (``hooks_set``): ``Tensor.record_stream`` (gpumem_record_stream: a block used
  on other streams goes back only once their work queued before its free has
  run), ``empty_cache``, ``set_per_process_memory_fraction`` (before gpumem's
  first allocation), and CUDA graphs' private pools (libgpumem_torch.so: a
  graph's memory is no one else's until the graph is gone). Without the graph
  hooks a capture is refused (``CUDAGraph.capture_begin`` raises) rather than
  let memory a graph replays into be handed out again. ``use()`` warns once with
  what is missing and what follows from it (``missing``).
* PyTorch passes its stream with each call: gpumem's stream-ordered allocation
  (gpumem_malloc_async, gpumem_free_async): a block freed on a stream goes to
  another stream only once the work queued before the free has run (see
  docs/python.md).
* PyTorch's pluggable allocator has no statistics (``memory_allocated`` and the
  rest raise "CUDAPluggableAllocator does not yet support getDeviceStats"), no
  ``_record_memory_history`` nor ``_snapshot``. ``use()`` replaces these
  functions in ``torch.cuda.memory`` and ``torch.cuda`` (the same functions,
  re-exported) by ones that report gpumem's figures under PyTorch's keys for
  the CUDA device asked (its first logical device), give unused memory back, and
  record and snapshot gpumem's pools: see ``PATCHED``.
  ``restore()`` puts PyTorch's functions back. A name imported before ``use()``
  (``from torch.cuda import reset_peak_memory_stats``) is still PyTorch's: call
  it through the module (``torch.cuda.reset_peak_memory_stats()``). PyTorch's
  ``memory_allocated``, ``memory_reserved`` and their ``max_`` twins read
  ``memory_stats`` from their module, and its ``memory_stats`` reads
  ``memory_stats_as_nested_dict``, so even early imports of these report
  gpumem's figures; ``reset_peak_memory_stats``, ``reset_accumulated_memory_stats``
  and ``memory_summary`` imported early do not (``empty_cache`` does, through
  the reset hook).

PyTorch cannot change its allocator back once one has been used (a pluggable
allocator counts as used from its creation): after ``restore()`` allocation
stays with gpumem, only the Python functions are PyTorch's again, and a later
``use()`` patches them anew without making another allocator.
"""

import collections
import ctypes
import os
import sys
import threading
import warnings

from . import _lib, hooks

__all__ = ["HOOKS", "PATCHED", "hooks_set", "library_path", "missing", "oom_error",
           "raises_on_oom", "restore", "use"]

SHIM = "libgpumem_torch.so"
C10_SHIM = "libgpumem_torch_c10.so"
_SHIM_FUNCTIONS = ("gpumem_torch_alloc_or_throw", "gpumem_torch_free_stream")
_C10_FUNCTIONS = ("gpumem_torch_c10_alloc", "gpumem_torch_c10_free")
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
    "_record_memory_history",
    "_snapshot",
    "_dump_snapshot",
)

#: The hooks of PyTorch's allocator object that use() fills where PyTorch has
#: them (the setter's name on CUDAPluggableAllocator(...).allocator(), what it
#: does under gpumem, the function given and the library it comes from: "c" is
#: libgpumem, "shim" libgpumem_torch.so).
HOOKS = (
    ("set_record_stream_fn", "Tensor.record_stream", "gpumem_torch_record_stream", "c"),
    ("set_reset_fn", "torch.cuda.empty_cache", "gpumem_torch_empty_cache", "c"),
    ("set_begin_allocate_to_pool", "CUDA graphs' private pools",
     "gpumem_torch_begin_allocate_to_pool", "shim"),
    ("set_end_allocate_to_pool_fn", "CUDA graphs' private pools",
     "gpumem_torch_end_allocate_to_pool", "shim"),
    ("set_release_pool", "CUDA graphs' private pools", "gpumem_torch_release_pool", "shim"),
    ("set_memory_fraction_fn", "torch.cuda.set_per_process_memory_fraction",
     "gpumem_torch_set_memory_fraction", "shim"),
)
_GRAPH_HOOKS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn",
                "set_release_pool")

#: The file PyTorch's allocator was loaded from (None before use()).
library_path = None
#: True when out of memory raises (libgpumem_torch_c10.so or libgpumem_torch.so),
#: False when PyTorch gets NULL (libgpumem's C pair); None before use().
raises_on_oom = None
#: What out of memory raises: "torch.cuda.OutOfMemoryError" (libgpumem_torch_c10.so),
#: "RuntimeError" (libgpumem_torch.so), None (the C pair, or before use()).
oom_error = None
#: {setter name: True when use() gave PyTorch gpumem's function} (None before use()).
hooks_set = None
#: What use() said the user lacks and what follows, one sentence each ([] when
#: nothing is missing; None before use()).
missing = None

_lock = threading.Lock()
_allocator = None  # the CUDAPluggableAllocator made current; PyTorch keeps it
_saved = None      # {(module, name): PyTorch's function} while patched
_counts = {}       # logical device -> _Counts
_shim = None       # libgpumem_torch.so (ctypes), for PyTorch's statistics; None: C pair
_graphs_guarded = False


# ------------------------------------------------------------- the library --


def shim_candidates(name=SHIM):
    """(where, path) to look for `name` (libgpumem_torch.so, libgpumem_torch_c10.so),
    beside the libgpumem the package loaded: in the same folder (an install: all go
    to libdir; a copy beside the package), then the Meson build folder's cpp/ (the
    library is in build/lib). None when the library was found by a bare name."""
    if os.sep not in _lib.path:
        return []
    libdir = os.path.dirname(os.path.abspath(_lib.path))
    return [("beside libgpumem", os.path.join(libdir, name)),
            ("Meson build folder", os.path.join(os.path.dirname(libdir), "cpp", name))]


def _find(name, functions, check=None):
    """(path, tried): the first `name` that loads and has `functions` (and that
    check(so) accepts: None, or why not), or None; `tried` says why each place
    was passed over."""
    tried = []
    for where, path in shim_candidates(name):
        if not os.path.exists(path):
            tried.append("%s: %s: not found" % (where, path))
            continue
        try:
            so = ctypes.CDLL(path)
            for fn in functions:
                getattr(so, fn)
        except (OSError, AttributeError) as e:
            tried.append("%s: %s: %s" % (where, path, e))
            continue
        refused = check(so) if check else None
        if refused:
            tried.append("%s: %s: %s" % (where, path, refused))
            continue
        return path, tried
    if not tried:
        tried.append("libgpumem was loaded by name (%s), so there is no folder to look in"
                     % _lib.path)
    return None, tried


def find_shim():
    """(path, tried): the first libgpumem_torch.so that loads and has both
    functions, or None; `tried` says why each place was passed over."""
    return _find(SHIM, _SHIM_FUNCTIONS)


def find_c10_shim(torch_version):
    """(path, tried): the first libgpumem_torch_c10.so that loads, has its pair
    and was built against PyTorch `torch_version`, or None."""
    def same_pytorch(so):
        fn = so.gpumem_torch_c10_pytorch_version
        fn.restype = ctypes.c_char_p
        built = fn().decode("utf-8", "replace")
        if built != torch_version:
            return ("built against PyTorch %s, and this is PyTorch %s (its exception "
                    "types must be the very ones PyTorch has)" % (built, torch_version))
        return None
    return _find(C10_SHIM, _C10_FUNCTIONS + ("gpumem_torch_c10_pytorch_version",),
                 same_pytorch)


# ------------------------------------------------------------ use, restore --


def _choose(torch):
    """(path, names, oom_error, shim path or None, sentences of what is missing)."""
    notes = []
    shim, tried = find_shim()
    if shim is None:
        notes.append(
            "%s not found (%s), so out of memory cannot raise: PyTorch gets "
            "libgpumem's gpumem_torch_malloc, whose failure it sees as a NULL tensor "
            "(gpumem prints the reason), and CUDA graphs' private pools, PyTorch's "
            "allocation statistics (small and large pool, requested bytes) and "
            "set_per_process_memory_fraction are not there either. Build gpumem with "
            "a C++ compiler to have %s." % (SHIM, "; ".join(tried), SHIM))
        return _lib.path, _C_FUNCTIONS, None, None, notes
    c10, tried = find_c10_shim(getattr(torch, "__version__", "unknown"))
    if c10 is not None:
        return c10, _C10_FUNCTIONS, "torch.cuda.OutOfMemoryError", shim, notes
    notes.append(
        "%s was not found (%s), so out of memory raises RuntimeError (its message "
        "begins with PyTorch's words, 'CUDA out of memory.', which batch-size "
        "finders look for), not torch.cuda.OutOfMemoryError, which only C++ "
        "built against this PyTorch's headers and libc10 can throw: build gpumem "
        "(meson setup) with a python3 that imports this PyTorch to have it."
        % (C10_SHIM, "; ".join(tried)))
    return shim, _SHIM_FUNCTIONS, "RuntimeError", shim, notes


def _give_hooks(hooks, shim_path):
    """Gives PyTorch's allocator object each hook it has and gpumem can serve;
    returns ({setter: given}, sentences of what is missing)."""
    libraries = {"c": ctypes.CDLL(_lib.path),
                 "shim": ctypes.CDLL(shim_path) if shim_path else None}
    given, notes = {}, []
    for setter, what, fn, where in HOOKS:
        so = libraries[where]
        if not hasattr(hooks, setter) or so is None:
            given[setter] = False
            continue
        getattr(hooks, setter)(ctypes.cast(getattr(so, fn), ctypes.c_void_p).value)
        given[setter] = True
    lacks = [s for s, _, _, _ in HOOKS if not hasattr(hooks, s)]
    if lacks:
        notes.append(
            "This PyTorch's allocator object (CUDAPluggableAllocator(...).allocator()) "
            "has no %s." % ", ".join(lacks))
    if not given["set_record_stream_fn"]:
        notes.append(
            "Tensor.record_stream does nothing: a tensor used on another stream "
            "must be synchronized with its own stream before it is freed, or its "
            "memory may be handed out while that stream still uses it.")
    if not all(given[s] for s in _GRAPH_HOOKS):
        notes.append(
            "CUDA graphs cannot have private pools, so capturing one "
            "(torch.cuda.graph, CUDAGraph.capture_begin) raises RuntimeError "
            "rather than let memory a graph replays into be handed out again.")
    if not given["set_reset_fn"]:
        notes.append("torch.cuda.empty_cache gives memory back only when called "
                     "through torch.cuda (gpumem.torch patches it there).")
    return given, notes


def use():
    """Makes gpumem PyTorch's CUDA allocator, gives PyTorch's allocator object
    every hook it has that gpumem serves, and patches the statistics functions
    (see the module's documentation); returns the CUDAPluggableAllocator. Warns
    once (RuntimeWarning) with what is missing and what follows from it
    (``missing``). A second call changes nothing; after restore() it patches the
    functions again.

    Raises RuntimeError when PyTorch has already allocated on the GPU (it
    cannot change an allocator in use): call it first."""
    global _allocator, library_path, raises_on_oom, oom_error, hooks_set, missing, _shim
    import torch

    with _lock:
        if _allocator is None:
            path, names, error, shim, notes = _choose(torch)
            allocator = torch.cuda.memory.CUDAPluggableAllocator(path, *names)
            given, more = _give_hooks(allocator.allocator(), shim)
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
            raises_on_oom = names != _C_FUNCTIONS
            oom_error = error
            hooks_set = given
            missing = notes + more
            _shim = _stats_library(shim)
            if not all(given[s] for s in _GRAPH_HOOKS):
                _guard_graphs(torch)
            if missing:
                warnings.warn("gpumem.torch.use(): " + " ".join(missing), RuntimeWarning,
                              stacklevel=2)
        if _saved is None:
            _patch(torch)
        return _allocator


def _stats_library(shim_path):
    if shim_path is None:
        return None
    so = ctypes.CDLL(shim_path)
    so.gpumem_torch_stats.restype = ctypes.c_size_t
    so.gpumem_torch_stats.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                      ctypes.c_size_t]
    so.gpumem_torch_reset_peak_stats.argtypes = [ctypes.c_int]
    so.gpumem_torch_reset_accumulated_stats.argtypes = [ctypes.c_int]
    so.gpumem_torch_private_pool_stats.restype = ctypes.c_size_t
    so.gpumem_torch_private_pool_stats.argtypes = [
        ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t]
    return so


def _guard_graphs(torch):
    """Without the graph-pool hooks a capture would allocate from gpumem's
    shared pool, whose memory goes to others while the graph may still replay
    into it: CUDAGraph.capture_begin refuses instead (torch.cuda.graph and
    make_graphed_callables call it). Stays after restore(): the allocator stays."""
    global _graphs_guarded
    graphs = getattr(getattr(torch, "cuda", None), "graphs", None)
    cls = getattr(graphs, "CUDAGraph", None)
    if cls is None or _graphs_guarded:
        return

    def capture_begin(self, *args, **kwargs):
        raise RuntimeError(
            "gpumem.torch: CUDA graph capture is refused: this PyTorch (%s) gives "
            "its allocator no graph-pool hooks%s, so the memory a graph replays into "
            "could be handed out again. Use a PyTorch whose allocator object has "
            "set_begin_allocate_to_pool and build gpumem with a C++ compiler, or capture without gpumem.torch."
            % (getattr(torch, "__version__", "?"),
               "" if _shim is not None else " gpumem could serve (libgpumem_torch.so "
               "is missing)"))

    cls.capture_begin = capture_begin
    _graphs_guarded = True


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

    __slots__ = ("carried", "zero", "device_zero", "totals_zero")

    def __init__(self):
        self.carried = (0, 0, 0)  # (allocs, frees, ooms) gpumem zeroed at our resets
        self.zero = (0, 0, 0)     # totals at the last reset_accumulated_memory_stats
        self.device_zero = (0, 0)  # (device allocs, device frees) then
        self.totals_zero = {}     # _pool_totals(info) then (gpumem never resets them)


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


_POOLS = ("all", "small_pool", "large_pool")
_FIELDS = ("current", "peak", "allocated", "freed")
#: PyTorch's statistics that libgpumem_torch.so counts, in the order of
#: gpumem_torch_stats (cpp/gpumem_torch.h).
SHIM_METRICS = ("allocation", "allocated_bytes", "requested_bytes")
#: PyTorch's statistics of the pool's memory (not of the requests): gpumem's
#: pool counts them (gpumem_memory_info). All in "large_pool": see _pool_figures.
POOL_METRICS = ("segment", "reserved_bytes", "active", "active_bytes",
                "inactive_split", "inactive_split_bytes")
#: PyTorch's statistics that gpumem does not count (absent from memory_stats
#: rather than made up): none since gpumem counts the inactive split blocks'
#: peaks and totals as its pool changes.
UNCOUNTED = ()
#: PyTorch's max_split_size when no limit is set (its CUDAAllocatorConfig keeps
#: SIZE_MAX, which DeviceStats' int64_t reads as -1): gpumem splits blocks of
#: any size, which is that configuration.
NO_SPLIT_LIMIT = -1


def _shim_figures(index):
    """{metric: {pool: {field: n}}} of libgpumem_torch.so's counts for CUDA
    device `index`."""
    n = _shim.gpumem_torch_stats(index, None, 0)
    out = (ctypes.c_int64 * n)()
    _shim.gpumem_torch_stats(index, out, n)
    figures, i = {}, 0
    for metric in SHIM_METRICS:
        figures[metric] = {}
        for pool in _POOLS:
            figures[metric][pool] = dict(zip(_FIELDS, out[i:i + 4]))
            i += 4
    return figures


def _pool_totals(info):
    """gpumem's totals that PyTorch's "allocated" and "freed" count, from
    gpumem_memory_info (never reset by gpumem: reset_accumulated_memory_stats
    keeps their figures then, in _Counts.totals_zero)."""
    return {
        ("segment", "allocated"): info.segments_total,
        ("segment", "freed"): info.segments_total - info.segments,
        ("reserved_bytes", "allocated"): info.reserved_total_bytes,
        ("reserved_bytes", "freed"): info.reserved_total_bytes - info.reserved_bytes,
        ("active", "allocated"): info.num_allocs_total,
        ("active", "freed"): info.num_allocs_total - info.live_blocks,
        ("active_bytes", "allocated"): info.freed_total_bytes + info.current_bytes,
        ("active_bytes", "freed"): info.freed_total_bytes,
        ("inactive_split", "allocated"): info.inactive_split_blocks_total,
        ("inactive_split", "freed"):
            info.inactive_split_blocks_total - info.inactive_split_blocks,
        ("inactive_split_bytes", "allocated"): info.inactive_split_bytes_total,
        ("inactive_split_bytes", "freed"):
            info.inactive_split_bytes_total - info.inactive_split_bytes,
        "num_alloc_retries": info.num_alloc_retries,
        "num_sync_all_streams": info.num_sync_all_streams,
    }


def _pool_figures(info, totals_zero):
    """{metric: {pool: {field: n}}} of gpumem's pool for POOL_METRICS.

    gpumem has one pool per device, whose segments serve requests of every size:
    it has no small pool (PyTorch's own 2 MiB segments for requests of at most
    1 MiB), so every segment, block and byte is in ``large_pool`` (equal to
    ``all``) and ``small_pool`` is 0 by construction. Segments are the address
    ranges the pool's memory forms (regions that touch join into one, as
    PyTorch's expandable segments grow), active blocks the allocations live in
    the pool (a block freed after record_stream stays active until its streams'
    work has run, as PyTorch's), inactive split blocks the free chunks of a
    segment that holds other chunks, with their bytes that are mapped (the
    granules a release or the trim gave back are not cached; a chunk with none
    mapped is none, as in PyTorch's unmapped expandable segments), in gpumem's
    256-byte granules. Each change adds its net change, as PyTorch's (include/
    gpumem.h, gpumem_memory_info)."""
    now = _pool_totals(info)
    current = {"segment": (info.segments, info.peak_segments),
               "reserved_bytes": (info.reserved_bytes, info.peak_reserved_bytes),
               "active": (info.live_blocks, info.peak_live_blocks),
               "active_bytes": (info.current_bytes, info.peak_bytes),
               "inactive_split": (info.inactive_split_blocks,
                                  info.peak_inactive_split_blocks),
               "inactive_split_bytes": (info.inactive_split_bytes,
                                        info.peak_inactive_split_bytes)}
    figures = {}
    for metric, (cur, peak) in current.items():
        fields = {"current": cur, "peak": peak}
        for field in ("allocated", "freed"):
            key = (metric, field)
            fields[field] = now[key] - totals_zero.get(key, 0)
        figures[metric] = {"all": fields, "large_pool": dict(fields),
                           "small_pool": dict.fromkeys(_FIELDS, 0)}
    return figures


def _private_pool_figures(index):
    """{(id0, id1): {pool: {field: n}}}: the bytes each CUDA graph's private pool
    holds (libgpumem_torch.so counts them), in ``large_pool`` as the rest."""
    n = _shim.gpumem_torch_private_pool_stats(index, None, 0)
    out = (ctypes.c_int64 * max(n, 1))()
    n = min(n, _shim.gpumem_torch_private_pool_stats(index, out, n))
    pools = {}
    for i in range(0, n - n % 6, 6):
        fields = dict(zip(_FIELDS, out[i + 2:i + 6]))
        pools[(out[i], out[i + 1])] = {"all": fields, "large_pool": dict(fields),
                                      "small_pool": dict.fromkeys(_FIELDS, 0)}
    return pools


def memory_stats_as_nested_dict(device=None):
    """gpumem's figures for CUDA device `device` under every key of PyTorch's
    own allocator, with PyTorch's meanings (docs/python.md has the table):

    * ``allocation``, ``allocated_bytes`` (the size rounded up to gpumem's 256
      bytes) and ``requested_bytes``, for ``all``, ``small_pool`` (requests of
      at most 1 MiB) and ``large_pool``, each ``current``, ``peak``,
      ``allocated`` and ``freed``: the allocations PyTorch asked for, as
      libgpumem_torch.so counts them. Without it (libgpumem's C pair),
      ``allocation.all`` and ``allocated_bytes.all`` from gpumem's pool;
    * ``segment``, ``reserved_bytes``, ``active``, ``active_bytes``,
      ``inactive_split`` and ``inactive_split_bytes``: gpumem's pool
      (_pool_figures: one pool, all of it ``large_pool``);
    * ``num_ooms``, ``num_alloc_retries`` (growths retried after out of memory
      once free regions were given back), ``num_sync_all_streams`` (waits for
      every stream's freed memory), ``num_device_alloc`` and
      ``num_device_free`` (the CUDA driver calls that took memory from this GPU,
      cuMemAlloc_v2 and cuMemCreate, and that gave it back, cuMemFree_v2 and
      cuMemUnmap, for every logical device on it), each since the last
      reset_accumulated_memory_stats;
    * ``num_oom_rejections`` 0 (gpumem has no policy that rejects before asking
      for memory: a request past the budget is an out of memory, in
      ``num_ooms``), ``max_split_size`` -1 (PyTorch's figure when no limit is
      set: gpumem splits blocks of any size) and ``oversize_allocations`` and
      ``oversize_segments`` 0 (an "oversize" block is one over that limit);
    * ``reserved_bytes_by_private_pools``: {(id0, id1): the bytes each CUDA
      graph's private pool holds} (libgpumem_torch.so; empty without it);
    * gpumem's own ``gpumem.{limit_bytes,largest_free_block}``.

    Empty before gpumem is initialized, as PyTorch's is before CUDA is."""
    if not _lib.is_initialized():
        return {}
    index, logical = _device(device, "memory_stats")
    info = _info(logical)
    device_allocs, device_frees = _device_calls(index)
    with _lock:
        (allocs, frees, ooms), c = _totals(logical, info)
        zero, device_zero, totals_zero = c.zero, c.device_zero, dict(c.totals_zero)
    if _shim is not None:
        stats = _shim_figures(index)
    else:
        stats = {
            "allocated_bytes": {"all": {"current": info.current_bytes,
                                        "peak": info.peak_bytes}},
            "allocation": {"all": {"current": allocs - frees,
                                   "allocated": allocs - zero[0],
                                   "freed": frees - zero[1]}},
        }
    stats.update(_pool_figures(info, totals_zero))
    now = _pool_totals(info)
    no_oversize = dict.fromkeys(_FIELDS, 0)
    stats.update({
        "num_ooms": ooms - zero[2],
        "num_alloc_retries": now["num_alloc_retries"]
        - totals_zero.get("num_alloc_retries", 0),
        "num_sync_all_streams": now["num_sync_all_streams"]
        - totals_zero.get("num_sync_all_streams", 0),
        "num_device_alloc": device_allocs - device_zero[0],
        "num_device_free": device_frees - device_zero[1],
        "num_oom_rejections": 0,
        "max_split_size": NO_SPLIT_LIMIT,
        "oversize_allocations": dict(no_oversize),
        "oversize_segments": dict(no_oversize),
        "reserved_bytes_by_private_pools": (
            _private_pool_figures(index) if _shim is not None else {}),
        "gpumem": {"limit_bytes": info.limit_bytes,
                   "largest_free_block": info.largest_free_block},
    })
    return stats


def memory_stats(device=None):
    """memory_stats_as_nested_dict flattened to dotted keys, sorted (as
    PyTorch's: a private pool's id (a, b) becomes "a_b")."""
    flat = []

    def walk(prefix, value):
        if isinstance(value, dict):
            for key, sub in value.items():
                if isinstance(key, tuple):
                    key = "_".join(str(part) for part in key)
                walk(prefix + "." + str(key) if prefix else str(key), sub)
        else:
            flat.append((prefix, value))

    walk("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def _light(device, api):
    """(shim figures or None, gpumem's memory info) for the four one-figure
    functions, without a snapshot; None before gpumem is initialized."""
    if not _lib.is_initialized():
        return None
    index, logical = _device(device, api)
    return (_shim_figures(index) if _shim is not None else None), _info(logical)


def memory_allocated(device=None):
    """Bytes in the allocations PyTorch asked for on CUDA device `device`
    (``allocated_bytes.all.current``)."""
    got = _light(device, "memory_allocated")
    if got is None:
        return 0
    shim, info = got
    return shim["allocated_bytes"]["all"]["current"] if shim else info.current_bytes


def max_memory_allocated(device=None):
    """The peak of memory_allocated since start or reset_peak_memory_stats."""
    got = _light(device, "max_memory_allocated")
    if got is None:
        return 0
    shim, info = got
    return shim["allocated_bytes"]["all"]["peak"] if shim else info.peak_bytes


def memory_reserved(device=None):
    """Bytes gpumem's pool has taken from the GPU (in use plus cached)."""
    got = _light(device, "memory_reserved")
    return got[1].reserved_bytes if got else 0


def max_memory_reserved(device=None):
    """The peak of memory_reserved since start or reset_peak_memory_stats."""
    got = _light(device, "max_memory_reserved")
    return got[1].peak_reserved_bytes if got else 0


def reset_peak_memory_stats(device=None):
    """Peaks start again from the current figures (gpumem_reset_memory_stats,
    and libgpumem_torch.so's); the allocation counters go on (gpumem zeroes
    them: they are carried here)."""
    if not _lib.is_initialized():
        return
    index, logical = _device(device, "reset_peak_memory_stats")
    with _lock:
        # An allocation between the read and the reset is not counted: the
        # counters are figures for people, the peaks are exact.
        info = _info(logical)
        totals, c = _totals(logical, info)
        _lib.lib.gpumem_reset_memory_stats(None, logical)
        c.carried = totals
        if _shim is not None:
            _shim.gpumem_torch_reset_peak_stats(index)


def reset_accumulated_memory_stats(device=None):
    """The ``allocated`` and ``freed`` totals (private pools' included; a
    released pool's entry goes), ``num_ooms``, ``num_alloc_retries``,
    ``num_sync_all_streams``, ``num_device_alloc`` and ``num_device_free``
    start again from 0, as PyTorch's."""
    if not _lib.is_initialized():
        return
    index, logical = _device(device, "reset_accumulated_memory_stats")
    with _lock:
        info = _info(logical)
        totals, c = _totals(logical, info)
        c.zero = totals
        c.device_zero = _device_calls(index)
        c.totals_zero = _pool_totals(info)
        if _shim is not None:
            _shim.gpumem_torch_reset_accumulated_stats(index)


def empty_cache():
    """Gives every wholly free region of every logical device back to the GPU
    (gpumem_release_unused): through PyTorch's own empty_cache where PyTorch
    took gpumem's reset hook (set_reset_fn), else after it (it does nothing for
    a pluggable allocator without one). With growth off a pool is one region,
    which goes back only when nothing in it is live."""
    original = _original("empty_cache")
    if original is not None:
        original()
    if hooks_set and hooks_set.get("set_reset_fn"):
        return
    if _lib.is_initialized():
        released = ctypes.c_uint64()
        _lib.lib.gpumem_release_unused(None, -1, ctypes.byref(released))


def _record_memory_history(enabled="all", context="all", stacks="all",
                           max_entries=sys.maxsize, *args, **kwargs):
    """PyTorch's private torch.cuda.memory._record_memory_history, which its
    pluggable allocator refuses ("does not yet support recordHistory"): gpumem's
    event history of every logical device (gpumem.record_history), of
    `max_entries` events each (PyTorch's default, sys.maxsize, keeps 100,000:
    gpumem's ring is allocated whole); `enabled` None (or False) turns it off.
    PyTorch's other arguments (stack traces, context, device) have no meaning for
    gpumem and are accepted."""
    del context, stacks, args, kwargs
    from .snapshot import record_history  # noqa: PLC0415

    if enabled is None or enabled is False:  # False: PyTorch's older boolean form
        record_history(0)
        return
    if max_entries >= 2**31:
        max_entries = 100000
    record_history(max_entries)


def _snapshot(device=None, *args, **kwargs):
    """PyTorch's private torch.cuda.memory._snapshot: gpumem's snapshot of every
    logical device (gpumem.snapshot), in the structure PyTorch's memory viewer
    reads, its event histories as ``device_traces``."""
    del device, args, kwargs
    from .snapshot import snapshot  # noqa: PLC0415

    return snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle", *args, **kwargs):
    """PyTorch's private torch.cuda.memory._dump_snapshot: gpumem.dump_snapshot,
    a pickle PyTorch's memory viewer opens."""
    del args, kwargs
    from .snapshot import dump_snapshot  # noqa: PLC0415

    dump_snapshot(filename)


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
              " CUDA OOMs: %-8d | retries after giving memory back: %d"
              % (stats["num_ooms"], stats["num_alloc_retries"]),
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
