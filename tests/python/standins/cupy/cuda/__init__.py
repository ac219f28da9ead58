"""Stand-in for ``cupy.cuda``: the current device (``Device``, ``Device(n).use()``,
``with Device(n):``), streams (``Stream``, ``Stream.null``, ``with stream:``,
``get_current_stream()``; ``.ptr`` is the cudaStream_t as an int, 0 for the
null stream), ``UnownedMemory``, ``MemoryPointer``, ``set_allocator`` and
``alloc`` (what CuPy's arrays call), and ``memory.OutOfMemoryError``."""

from . import memory  # noqa: F401
from .memory import MemoryPointer, UnownedMemory, alloc, set_allocator  # noqa: F401
from .stream import Stream, get_current_stream  # noqa: F401


class Device:
    """CuPy's device: ``Device()`` is the current one; ``use()`` or ``with``
    makes one current (per thread in CuPy; one thread suffices here)."""

    _current = 0

    def __init__(self, device=None):
        self.id = Device._current if device is None else int(device)
        self._previous = []

    def use(self):
        Device._current = self.id

    def __enter__(self):
        self._previous.append(Device._current)
        self.use()
        return self

    def __exit__(self, *exc):
        Device._current = self._previous.pop()
