"""Stand-in for ``torch.cuda.memory`` (torch/cuda/memory.py): the allocator
classes and the statistics functions, each calling what PyTorch's calls. As in
PyTorch, ``memory_allocated`` and the others read ``memory_stats`` from this
module at each call, and ``memory_stats`` is empty before CUDA is initialized."""

import collections
import ctypes

from .. import _C
from . import _get_device_index, is_initialized

__all__ = [
    "CUDAPluggableAllocator", "change_current_allocator", "empty_cache",
    "max_memory_allocated", "max_memory_reserved", "memory_allocated",
    "memory_reserved", "memory_stats", "memory_stats_as_nested_dict", "memory_summary",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats",
]


def _record_memory_history(enabled="all", context="all", stacks="all",
                           max_entries=2**63 - 1, device=None):
    _C._cuda_record_memory_history(enabled)


def _snapshot(device=None):
    return _C._cuda_memorySnapshot()


def _dump_snapshot(filename="dump_snapshot.pickle"):
    import pickle
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


class _CUDAAllocator:
    def __init__(self, allocator):
        self._allocator = allocator

    def allocator(self):
        return self._allocator


class CUDAPluggableAllocator(_CUDAAllocator):
    """Loads the two functions from the .so with ctypes, by name, and hands
    their addresses to the C++ side."""

    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        so = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(so, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(so, free_fn_name), ctypes.c_void_p).value
        self._allocator = _C._cuda_customAllocator(alloc_fn, free_fn)


def change_current_allocator(allocator):
    _C._cuda_changeCurrentAllocator(allocator.allocator())


def empty_cache():
    if is_initialized():
        _C._cuda_emptyCache()


def memory_stats_as_nested_dict(device=None):
    if not is_initialized():
        return {}
    device = _get_device_index(device, optional=True)
    return _C._cuda_memoryStats(device)


def memory_stats(device=None):
    result = []

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for key, value in obj.items():
                walk(prefix + "." + key if prefix else key, value)
        else:
            result.append((prefix, obj))

    walk("", memory_stats_as_nested_dict(device=device))
    result.sort()
    return collections.OrderedDict(result)


def reset_peak_memory_stats(device=None):
    device = _get_device_index(device, optional=True)
    return _C._cuda_resetPeakMemoryStats(device)


def reset_accumulated_memory_stats(device=None):
    device = _get_device_index(device, optional=True)
    return _C._cuda_resetAccumulatedMemoryStats(device)


def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)


def memory_summary(device=None, abbreviated=False):
    """Indexes PyTorch's keys (a KeyError where one is missing, as PyTorch's)."""
    device = _get_device_index(device, optional=True)
    stats = memory_stats(device=device)
    return "PyTorch CUDA memory summary, device ID %d: %d allocated, %d OOMs, %d retries\n" % (
        device, stats["allocated_bytes.all.current"], stats["num_ooms"],
        stats["num_alloc_retries"])
