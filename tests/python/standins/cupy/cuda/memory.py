"""Stand-in for ``cupy.cuda.memory``: ``OutOfMemoryError(size, total, limit=0)``
with CuPy's message ("Out of memory allocating 1,024 bytes (allocated so far:
0 bytes[, limit set to: N bytes])."), ``UnownedMemory(ptr, size, owner,
device_id)`` (keeps ``owner`` alive while CuPy holds the memory),
``MemoryPointer(mem, offset)``, and the allocator CuPy's arrays call
(``set_allocator``, ``alloc``)."""


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        text = "Out of memory allocating {:,} bytes (allocated so far: {:,} bytes".format(
            size, total)
        if limit:
            text += ", limit set to: {:,} bytes".format(limit)
        super().__init__(text + ").")


class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id=-1):
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


_allocator = None


def set_allocator(allocator=None):
    global _allocator
    _allocator = allocator


def alloc(size):
    if _allocator is None:
        raise RuntimeError("stand-in cupy: only an allocator set with set_allocator "
                           "is modelled")
    return _allocator(size)
