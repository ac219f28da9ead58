"""gpumem: GPU memory pools with TensorFlow's ``tf.config`` vocabulary.

A pure-Python binding (ctypes, standard library only) of libgpumem. Code
written for TensorFlow's GPU configuration runs after changing its import::

    import gpumem as tf
    gpus = tf.config.list_physical_devices('GPU')
    tf.config.experimental.set_memory_growth(gpus[0], True)

gpumem's own extensions live beside ``config``: per-GPU memory fractions
(``set_memory_fraction``), ``release_unused``, the CUDA driver calls made
(``driver_calls``), allocation (``malloc``, which
returns a ``Buffer``), and the framework hooks (``cupy_allocator``,
``torch_allocator``), and what is in the memory (``snapshot``,
``dump_snapshot`` and ``tag``, in PyTorch's snapshot format; ``python3 -m
gpumem.map`` draws one; ``record_history`` and ``dump_trace``, the event
history and the replayable trace). TensorFlow 1's forms run too: ``GPUOptions``,
``ConfigProto`` and ``Session`` (also under ``compat.v1``), which apply the GPU
options and initialize. PyTorch in one call: ``import gpumem.torch;
gpumem.torch.use()`` (a submodule, imported only when asked for, so that
``import gpumem`` never imports torch). Exceptions are in ``gpumem.errors``.

Everything works on the process-wide default runtime, created from the
environment (GPUMEM_SIM_DEVICES, GPUMEM_BACKEND, ...) at the first call.
"""

from . import _lib
from . import config, errors
from ._config import (driver_calls, get_memory_fraction, initialize, is_initialized,
                      release_unused, set_memory_fraction)
from ._devices import LogicalDevice, LogicalDeviceConfiguration, PhysicalDevice
from ._tf1 import ConfigProto, GPUOptions, InteractiveSession, Session, compat
from .buffer import Buffer, malloc
from .cupy_pool import cupy_memory_pool
from .hooks import cupy_allocator, torch_allocator
from .snapshot import dump_snapshot, dump_trace, record_history, snapshot, tag

__version__ = "0.2.0"

#: Path of the libgpumem loaded (found through the dynamic loader: the file it
#: opened, or the soname where dladdr is not available).
library_path = _lib.path
#: (major, minor, patch) of the libgpumem loaded.
library_version = _lib.version

__all__ = [
    "Buffer",
    "ConfigProto",
    "GPUOptions",
    "InteractiveSession",
    "LogicalDevice",
    "LogicalDeviceConfiguration",
    "PhysicalDevice",
    "Session",
    "compat",
    "config",
    "cupy_allocator",
    "cupy_memory_pool",
    "driver_calls",
    "dump_snapshot",
    "dump_trace",
    "errors",
    "get_memory_fraction",
    "initialize",
    "is_initialized",
    "library_path",
    "library_version",
    "malloc",
    "record_history",
    "release_unused",
    "set_memory_fraction",
    "snapshot",
    "tag",
    "torch_allocator",
]
