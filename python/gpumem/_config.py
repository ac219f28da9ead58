"""The implementation of ``gpumem.config`` (TensorFlow's ``tf.config`` names)
and of gpumem's own configuration extensions, over the default runtime.

Behaviour follows TensorFlow's ``tensorflow/python/eager/context.py`` where
gpumem has the same concept: the same return values (``get_memory_growth`` is
None until set, ``get_logical_device_configuration`` None until set), the same
exception types, and messages that begin with TensorFlow's sentence and go on
with gpumem's ("Physical devices cannot be modified after being initialized:
gpumem_set_memory_growth(GPU:0): the devices are already initialized (by ...)").

gpumem lifts TensorFlow's restrictions that come from its internals: memory
growth may differ between GPUs and combine with logical devices and limits,
and a logical GPU may have no memory_limit (it shares what the others leave).

The CPU is mirrored for parity: one physical CPU, always visible, whose
logical devices (``set_logical_device_configuration(cpu, [...])``) are kept in
Python only.
"""

import ctypes
import math
import threading

from . import _devices, _lib, errors
from ._devices import (CPU_PHYSICAL, LogicalDevice, LogicalDeviceConfiguration,
                       PhysicalDevice)

_lock = threading.Lock()
_growth_set = {}     # physical GPU -> bool set through this package
_logical_set = {}    # physical GPU -> the list of configurations as passed
_cpu_logical = None  # CPU logical configurations, None = the default one

_PHYSICAL_FROZEN = "Physical devices cannot be modified after being initialized"
_VISIBLE_FROZEN = "Visible devices cannot be modified after being initialized"
_VIRTUAL_FROZEN = "Virtual devices cannot be modified after being initialized"


def _frozen(sentence, error):
    """TensorFlow's sentence first, then gpumem's message."""
    return errors.AlreadyInitializedError("%s: %s" % (sentence, error))


def _filter(devices, device_type):
    if device_type is None:
        return list(devices)
    return [d for d in devices if d.device_type == device_type]


# --------------------------------------------------------------- listing --


def list_physical_devices(device_type=None):
    """The machine's devices, CPU first (``tf.config.list_physical_devices``).

    ``device_type`` ('GPU', 'CPU') filters, compared exactly as TensorFlow
    does. Never initializes anything.
    """
    return _filter([CPU_PHYSICAL] + _devices.physical_gpus(), device_type)


def list_logical_devices(device_type=None):
    """The logical devices, CPU first (``tf.config.list_logical_devices``).

    Initializes the devices (as in TensorFlow): afterwards the configuration
    can no longer change.
    """
    gpus = [LogicalDevice(name=_lib.text(d.name), device_type="GPU")
            for d in _lib.list_logical()]
    n_cpu = len(_cpu_logical) if _cpu_logical else 1
    cpus = [LogicalDevice(name="/device:CPU:%d" % i, device_type="CPU")
            for i in range(n_cpu)]
    return _filter(cpus + gpus, device_type)


# ------------------------------------------------------------ visibility --


def get_visible_devices(device_type=None):
    """The visible physical devices (``tf.config.get_visible_devices``)."""
    gpus = _devices.physical_gpus()
    return _filter([CPU_PHYSICAL] + [gpus[i] for i in _lib.visible_indices()],
                   device_type)


def _as_device_list(devices):
    if isinstance(devices, (str, PhysicalDevice, LogicalDevice)):
        return [devices]
    if (isinstance(devices, tuple) and len(devices) == 2
            and all(isinstance(x, str) for x in devices)
            and devices[1] in ("CPU", "GPU")):
        return [devices]  # a plain (name, device_type) tuple, as TensorFlow allows
    if isinstance(devices, (list, tuple)):
        return list(devices)
    return [devices]


def set_visible_devices(devices, device_type=None):
    """Makes only ``devices`` visible (``tf.config.set_visible_devices``).

    With ``device_type='GPU'`` only the GPUs change. The CPU always stays
    visible in gpumem. Before initialization only; afterwards a change raises
    RuntimeError (setting the visibility in force is accepted).
    """
    resolved = []
    for d in _as_device_list(devices):
        kind, index = _devices.resolve_physical(d, "set_visible_devices")
        if device_type is not None and kind != device_type:
            raise _devices.unrecognized(d, "it is not a %s device" % device_type)
        resolved.append((kind, index))
    if device_type not in (None, "GPU"):
        return
    gpus = [i for kind, i in resolved if kind == "GPU"]
    arr = (ctypes.c_int * max(len(gpus), 1))(*gpus)
    try:
        _lib.lib.gpumem_set_visible_devices(None, arr, len(gpus))
    except errors.AlreadyInitializedError as e:
        raise _frozen(_VISIBLE_FROZEN, e) from None


# ---------------------------------------------------------------- growth --


def _gpu_only(device, api, sentence):
    kind, index = _devices.resolve_physical(device, api)
    if kind != "GPU":
        raise errors.InvalidArgumentError("%s (gpumem: %r is a CPU)" % (sentence, device))
    return index


def get_memory_growth(device):
    """Whether memory growth is on for a physical GPU
    (``tf.config.experimental.get_memory_growth``).

    None until set, as in TensorFlow, unless the environment turned growth on
    (GPUMEM_FORCE_ALLOW_GROWTH or TF_FORCE_GPU_ALLOW_GROWTH): then True.
    """
    index = _gpu_only(device, "get_memory_growth",
                      "Cannot get memory growth of non-GPU devices")
    flag = ctypes.c_bool()
    _lib.lib.gpumem_get_memory_growth(None, index, ctypes.byref(flag))
    with _lock:
        if index not in _growth_set and not flag.value:
            return None
    return flag.value


def _check_bool(value, api, what):
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError("%s(): %s must be a bool, not %s %r"
                    % (api, what, type(value).__name__, value))


def set_memory_growth(device, enable):
    """Turns memory growth on or off for a physical GPU
    (``tf.config.experimental.set_memory_growth``).

    Each GPU has its own setting in gpumem, and growth combines with logical
    devices and limits. Before initialization only; afterwards a change raises
    RuntimeError (setting the value in force is accepted).
    """
    index = _gpu_only(device, "set_memory_growth",
                      "Cannot set memory growth on non-GPU and non-Pluggable devices")
    enable = _check_bool(enable, "set_memory_growth", "enable")
    try:
        _lib.lib.gpumem_set_memory_growth(None, index, enable)
    except errors.AlreadyInitializedError as e:
        raise _frozen(_PHYSICAL_FROZEN, e) from None
    with _lock:
        _growth_set[index] = enable


# ------------------------------------------------------- logical devices --


def _limit_bytes(config, api):
    limit = config.memory_limit
    if limit is None:
        return 0
    if isinstance(limit, bool) or not isinstance(limit, (int, float)):
        if type(limit).__name__.startswith(("int", "uint", "float")):
            limit = float(limit)  # numpy scalars
        else:
            raise TypeError("%s(): memory_limit must be a number of MB, not %s %r"
                            % (api, type(limit).__name__, limit))
    # ints are exact (no float: 10**400 MB is too large, not an OverflowError)
    if isinstance(limit, int):
        positive = limit > 0
    else:
        positive = math.isfinite(limit) and limit > 0
    if not positive:
        raise errors.InvalidArgumentError(
            "%s(): memory_limit %r is not a positive number of MB" % (api, limit))
    limit_bytes = limit * _lib.MIB if isinstance(limit, int) else int(limit * _lib.MIB)
    # 0 bytes means no cap in C, and ctypes would keep the low 64 bits of more
    # than 2**64: either would be another limit than the one asked for
    if limit_bytes == 0:
        raise errors.InvalidArgumentError(
            "%s(): memory_limit %r MB is less than one byte" % (api, limit))
    if limit_bytes >= 2**64:
        raise errors.InvalidArgumentError(
            "%s(): memory_limit %r MB is more than 2**64 bytes" % (api, limit))
    return limit_bytes


def _priority(config, api):
    p = config.experimental_priority
    if p is None:
        return 0
    if isinstance(p, bool) or not isinstance(p, int):
        raise TypeError("%s(): experimental_priority must be an int, not %s %r"
                        % (api, type(p).__name__, p))
    if not -2**31 <= p < 2**31:
        raise errors.InvalidArgumentError(
            "%s(): experimental_priority %d does not fit a C int" % (api, p))
    return p


def _check_configs(logical_devices, api):
    if isinstance(logical_devices, LogicalDeviceConfiguration) or not isinstance(
            logical_devices, (list, tuple)):
        raise TypeError("%s(): expected a list of LogicalDeviceConfiguration, not %s"
                        % (api, type(logical_devices).__name__))
    for c in logical_devices:
        if not all(hasattr(c, f) for f in LogicalDeviceConfiguration._fields):
            raise TypeError("%s(): %r is not a LogicalDeviceConfiguration" % (api, c))
    return list(logical_devices)


def set_logical_device_configuration(device, logical_devices):
    """Splits a physical device into logical devices
    (``tf.config.set_logical_device_configuration``).

    On a GPU, each ``LogicalDeviceConfiguration(memory_limit=MB)`` becomes a
    logical GPU with its own pool capped at that many MiB; ``[]`` restores the
    default single device. A limit, or their sum, above the GPU's memory raises
    ValueError. On the CPU (kept in Python) no limit may be given. Before
    initialization only; afterwards a change raises RuntimeError (setting the
    configuration in force is accepted).
    """
    global _cpu_logical
    api = "set_logical_device_configuration"
    kind, index = _devices.resolve_physical(device, api)
    configs = _check_configs(logical_devices, api)
    if kind == "CPU":
        for c in configs:
            if c.memory_limit is not None:
                raise errors.InvalidArgumentError(
                    "Setting memory limit on CPU virtual devices is currently not supported")
            if c.experimental_priority is not None:
                raise errors.InvalidArgumentError(
                    "Setting experimental_priority on CPU virtual devices is currently "
                    "not supported")
            if c.experimental_device_ordinal is not None:
                raise errors.InvalidArgumentError(
                    "Setting experimental_device_ordinal on CPU virtual devices is "
                    "currently not supported")
        with _lock:
            if _cpu_logical == configs:
                return
            if _lib.is_initialized():
                raise errors.AlreadyInitializedError(
                    "%s: gpumem: the devices are already initialized" % _VIRTUAL_FROZEN)
            _cpu_logical = configs
        return
    structs = _lib.LogicalDeviceConfigStruct.array(max(len(configs), 1))
    for i, c in enumerate(configs):
        if c.experimental_device_ordinal is not None:
            raise errors.InvalidArgumentError(
                "%s(): experimental_device_ordinal is not supported by gpumem (logical "
                "devices are numbered in the order of the GPUs and of their "
                "configurations)" % api)
        structs[i].memory_limit_bytes = _limit_bytes(c, api)
        structs[i].priority = _priority(c, api)
    try:
        _lib.lib.gpumem_set_logical_device_configuration(None, index, structs, len(configs))
    except errors.AlreadyInitializedError as e:
        raise _frozen(_VIRTUAL_FROZEN, e) from None
    with _lock:
        _logical_set[index] = configs


def get_logical_device_configuration(device):
    """The logical configuration of a physical device, None when none was set
    (``tf.config.get_logical_device_configuration``)."""
    kind, index = _devices.resolve_physical(device, "get_logical_device_configuration")
    if kind == "CPU":
        return None if _cpu_logical is None else list(_cpu_logical)
    current = _lib.logical_config(index)
    with _lock:
        mine = _logical_set.get(index)
    if mine is not None:
        as_c = [(_limit_bytes(c, "get"), _priority(c, "get")) for c in mine]
        if as_c == current:
            return list(mine)
    if not current:
        return None
    return [LogicalDeviceConfiguration(
        memory_limit=(b // _lib.MIB if b % _lib.MIB == 0 else b / _lib.MIB) if b else None,
        experimental_priority=p or None) for b, p in current]


# ------------------------------------------------------------ statistics --


def _logical_gpu(device, api, cpu_message=None):
    """A logical GPU's index; a CPU raises ValueError with `cpu_message` (one
    %s: the device's name; TensorFlow's sentence where it has one)."""
    kind, index = _devices.resolve_logical(device, api)
    if kind != "GPU":
        name = device if isinstance(device, str) else "CPU:%d" % index
        if cpu_message is None:
            cpu_message = api + "() applies to GPUs only, not '%s'"
        raise errors.InvalidArgumentError(cpu_message % name)
    return index


def get_memory_info(device):
    """Memory of a logical GPU (``tf.config.experimental.get_memory_info``).

    Returns TensorFlow's keys, ``current`` (bytes in live allocations) and
    ``peak`` (highest ``current`` since start or reset), and gpumem's:
    ``reserved`` and ``peak_reserved`` (taken from the GPU), ``limit`` (the
    pool's budget), ``largest_free_block``, ``num_allocs``, ``num_frees`` and
    ``num_ooms``. Initializes the devices.
    """
    index = _logical_gpu(device, "get_memory_info",
                         "Allocator stats not available for device '%s'")
    info = _lib.MemoryInfoStruct()
    _lib.lib.gpumem_get_memory_info(None, index, ctypes.byref(info))
    return {
        "current": info.current_bytes,
        "peak": info.peak_bytes,
        "reserved": info.reserved_bytes,
        "peak_reserved": info.peak_reserved_bytes,
        "limit": info.limit_bytes,
        "largest_free_block": info.largest_free_block,
        "num_allocs": info.num_allocs,
        "num_frees": info.num_frees,
        "num_ooms": info.num_ooms,
    }


def get_memory_usage(device):
    """Bytes in use on a logical GPU (TensorFlow's deprecated
    ``tf.config.experimental.get_memory_usage``): ``get_memory_info()['current']``."""
    return get_memory_info(device)["current"]


def reset_memory_stats(device):
    """Sets ``peak`` to ``current`` (and ``peak_reserved`` to ``reserved``,
    the counters to 0) for a logical GPU
    (``tf.config.experimental.reset_memory_stats``)."""
    index = _logical_gpu(device, "reset_memory_stats",
                         "Cannot reset memory stats for device '%s'")
    _lib.lib.gpumem_reset_memory_stats(None, index)


def get_device_details(device):
    """``{'device_name': model, 'compute_capability': (major, minor)}`` for a
    physical GPU, ``{}`` for the CPU (``tf.config.experimental.get_device_details``)."""
    kind, index = _devices.resolve_physical(device, "get_device_details")
    if kind == "CPU":
        return {}
    d = _devices.physical_structs()[index]
    return {"device_name": _lib.text(d.model),
            "compute_capability": (d.compute_major, d.compute_minor)}


# ------------------------------------------------------ gpumem extensions --


def _physical_or_all(device, api):
    if device is None:
        return -1
    return _gpu_only(device, api, "%s applies to GPUs only" % api)


def set_memory_fraction(device, fraction):
    """Caps a physical GPU (``device=None``: every GPU) at ``fraction`` of its
    total memory, as TensorFlow's per_process_gpu_memory_fraction but per GPU;
    0 clears it. Before initialization only (RuntimeError after a change)."""
    index = _physical_or_all(device, "set_memory_fraction")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError("set_memory_fraction(): fraction must be a number, not %s %r"
                        % (type(fraction).__name__, fraction))
    try:
        value = float(fraction)
    except OverflowError:  # an int past a double's range: out of [0, 1] anyway
        raise errors.InvalidArgumentError(
            "set_memory_fraction(): fraction %r is not in [0, 1]" % (fraction,)) from None
    try:
        _lib.lib.gpumem_set_memory_fraction(None, index, value)
    except errors.AlreadyInitializedError as e:
        raise _frozen(_PHYSICAL_FROZEN, e) from None


def get_memory_fraction(device):
    """The fraction in force for a physical GPU; 0.0 when none is set."""
    index = _gpu_only(device, "get_memory_fraction",
                      "get_memory_fraction applies to GPUs only")
    value = ctypes.c_double()
    _lib.lib.gpumem_get_memory_fraction(None, index, ctypes.byref(value))
    return value.value


def release_unused(device=None):
    """Gives wholly free memory of a logical GPU (None: every logical GPU)
    back to the device; returns the bytes released. The pool takes memory
    again on demand, up to its budget. When the driver refuses a region, the
    BackendError raised has ``released``, the bytes the other regions gave."""
    index = -1 if device is None else _logical_gpu(device, "release_unused")
    released = ctypes.c_uint64()
    try:
        _lib.lib.gpumem_release_unused(None, index, ctypes.byref(released))
    except errors.BackendError as e:
        e.released = released.value
        raise
    return released.value


def driver_calls(device=None):
    """The CUDA driver calls gpumem made on a physical GPU (``device=None``:
    every GPU, summed) since its runtime was created, as ``{entry point:
    {'calls': n, 'ns': time inside them, 'bytes': sizes the memory calls were
    given}}``, every entry point gpumem calls, zeros included (C's
    gpumem_list_driver_calls). On simulated GPUs: the calls the CUDA backend
    would make for the same work, ``ns`` the simulation's own time. The figures
    only grow: compare two readings. Initializes nothing."""
    return _lib.driver_calls(_physical_or_all(device, "driver_calls"))


def initialize():
    """Initializes the devices now (idempotent); configuration ends here."""
    _lib.lib.gpumem_initialize(None)


def is_initialized():
    """True once the devices are initialized."""
    return _lib.is_initialized()
