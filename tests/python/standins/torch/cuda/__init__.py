"""Stand-in for ``torch.cuda``: lazy initialization (``is_initialized``,
``init``; the first CUDA tensor or ``current_device`` does it), two devices,
the current device and stream (``set_device``, ``current_stream``, ``Stream``,
``stream``), ``_get_device_index``, ``OutOfMemoryError``, ``CUDAGraph`` and
``graph`` (``torch.cuda.graphs``), and ``torch.cuda.memory``'s functions re-exported (the same objects, as ``from .memory import *`` does)."""

import contextlib
import itertools

from .. import _C

_initialized = False
_device = 0
_handles = itertools.count(0x7000, 0x100)  # made-up stream handles


class OutOfMemoryError(RuntimeError):
    """PyTorch raises it from c10's OutOfMemoryError (its native allocator)."""


def is_available():
    return True


def device_count():
    return 2


def is_initialized():
    return _initialized


def _lazy_init():
    global _initialized
    if not _initialized:
        _initialized = True
        _C._current_allocator().init(device_count())


def init():
    _lazy_init()


def current_device():
    _lazy_init()
    return _device


def set_device(index):
    global _device
    _device = _get_device_index(index)


def synchronize(device=None):
    pass


def _get_device_index(device, optional=False, allow_cpu=False):
    if device is None:
        if optional:
            return current_device()
        raise ValueError("Expected a torch.device with a specified index or an integer, "
                         "but got:None")
    if isinstance(device, int):
        return device
    kind, _, index = str(device).partition(":")
    if kind != "cuda" and not allow_cpu:
        raise ValueError("Expected a cuda device, but got: %s" % device)
    if index:
        return int(index)
    if optional:
        return current_device()
    raise ValueError("Expected a torch.device with a specified index or an integer, "
                     "but got:%s" % device)


class Stream:
    def __init__(self, device=None, _handle=None):
        self.device_index = _device if device is None else _get_device_index(device)
        self.cuda_stream = next(_handles) if _handle is None else _handle


_current_streams = {}


def current_stream(device=None):
    index = _get_device_index(device, optional=True)
    return _current_streams.get(index) or Stream(index, _handle=0)


@contextlib.contextmanager
def stream(s):
    index = s.device_index
    previous = _current_streams.get(index)
    _current_streams[index] = s
    try:
        yield
    finally:
        _current_streams[index] = previous


from . import graphs, memory  # noqa: E402
from .graphs import CUDAGraph, graph  # noqa: E402,F401
from .memory import *  # noqa: E402,F401,F403
