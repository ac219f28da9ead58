"""CuPy's memory-pool statistics, from gpumem: ``gpumem.cupy_memory_pool()``.

Under ``cupy.cuda.set_allocator(gpumem.cupy_allocator)`` CuPy's own pool is
bypassed, so ``cupy.get_default_memory_pool().used_bytes()`` and the others
say 0 and ``free_all_blocks()`` gives nothing back. This object has the
methods of ``cupy.cuda.MemoryPool`` that users read and call, each for CuPy's
current device (the first logical device on that GPU, as cupy_allocator
allocates), over gpumem's pool:

    pool = gpumem.cupy_memory_pool()
    cupy.cuda.set_allocator(pool.malloc)      # the same as gpumem.cupy_allocator
    pool.used_bytes(), pool.total_bytes(), pool.free_bytes(), pool.n_free_blocks()
    pool.free_all_blocks()                    # gpumem_release_unused
    pool.get_limit()                          # the logical device's budget

``set_limit`` configures gpumem before its first allocation (a fraction of the
GPU's total memory, or a limit for its one logical device); after, gpumem's
budget is fixed and it raises RuntimeError, as gpumem.config does.
"""

import ctypes
import json

from . import _config, _lib, errors
from ._devices import LogicalDeviceConfiguration, physical_gpus
from .hooks import _logical_for, cupy_allocator

__all__ = ["CupyMemoryPool", "cupy_memory_pool"]


def _device():
    import cupy  # only when asked: importing gpumem never imports CuPy

    return cupy.cuda.Device().id


class CupyMemoryPool:
    """cupy.cuda.MemoryPool's statistics and controls over gpumem's pools."""

    @staticmethod
    def malloc(size):
        """cupy_allocator(size): a ``cupy.cuda.MemoryPointer``."""
        return cupy_allocator(size)

    @staticmethod
    def _info():
        logical = _logical_for(_device(), "cupy_memory_pool")
        info = _lib.MemoryInfoStruct()
        _lib.lib.gpumem_get_memory_info(None, logical, ctypes.byref(info))
        return logical, info

    def used_bytes(self):
        """Bytes in live allocations of the current device's pool (all of them,
        CuPy's or not)."""
        return self._info()[1].current_bytes

    def total_bytes(self):
        """Bytes the pool holds from the GPU: in use plus cached."""
        return self._info()[1].reserved_bytes

    def free_bytes(self):
        """Bytes the pool holds and nothing uses (total_bytes - used_bytes)."""
        info = self._info()[1]
        return info.reserved_bytes - info.current_bytes

    def n_free_blocks(self):
        """Free chunks in the pool (from gpumem's snapshot)."""
        from .snapshot import snapshot_json  # noqa: PLC0415

        logical = self._info()[0]
        return sum(1 for seg in json.loads(snapshot_json(logical))["segments"]
                   for block in seg["blocks"] if block["state"] == "inactive")

    def free_all_blocks(self, stream=None):
        """Gives the pool's wholly free memory back to the GPU
        (gpumem_release_unused, which waits for the streams' pending frees
        first); `stream` is CuPy's argument, unused: gpumem frees every
        stream's."""
        del stream
        logical = self._info()[0]
        released = ctypes.c_uint64()
        _lib.lib.gpumem_release_unused(None, logical, ctypes.byref(released))

    def free_all_free(self):
        """CuPy's old name of free_all_blocks."""
        self.free_all_blocks()

    def get_limit(self):
        """The current device's budget in bytes (gpumem's limit_bytes)."""
        return self._info()[1].limit_bytes

    def set_limit(self, size=None, fraction=None):
        """Before gpumem's first allocation: caps the current GPU at `fraction`
        of its total memory, or its one logical device at `size` bytes (a
        whole number of MiB: gpumem.config takes MB). RuntimeError after: a
        budget is fixed once gpumem is initialized."""
        if (size is None) == (fraction is None):
            raise ValueError("set_limit(): give size or fraction, one of them")
        gpu = physical_gpus()[_device()]
        if fraction is not None:
            _config.set_memory_fraction(gpu, fraction)
            return
        if size % _lib.MIB:
            raise errors.InvalidArgumentError(
                "set_limit(): gpumem takes a limit in whole MiB, not %d bytes" % size)
        _config.set_logical_device_configuration(
            gpu, [LogicalDeviceConfiguration(memory_limit=size // _lib.MIB)])


def cupy_memory_pool():
    """A CupyMemoryPool (it holds no state: any number may be made)."""
    return CupyMemoryPool()
