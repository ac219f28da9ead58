"""Device objects as TensorFlow defines them, and the resolution of device
arguments (objects or strings) to gpumem's physical and logical indices.

``PhysicalDevice``, ``LogicalDevice`` and ``LogicalDeviceConfiguration`` are
named tuples with TensorFlow's names and fields, so they print, compare and
unpack as TensorFlow's do (tensorflow/python/eager/context.py).

Strings accepted wherever TensorFlow takes a device name: ``'GPU:0'``,
``'/device:GPU:0'``, ``'/physical_device:GPU:0'``, ``'/gpu:0'``,
``'/job:localhost/replica:0/task:0/device:GPU:0'`` (the type is not case
sensitive).
"""

import collections
import operator
import re

from . import _lib, errors

__all__ = ["PhysicalDevice", "LogicalDevice", "LogicalDeviceConfiguration",
           "VirtualDeviceConfiguration"]


class PhysicalDevice(collections.namedtuple("PhysicalDevice", ["name", "device_type"])):
    """A local device before initialization (``tf.config.PhysicalDevice``).

    Fields: ``name`` ('/physical_device:GPU:0'), ``device_type`` ('GPU', 'CPU').
    """

    __slots__ = ()


class LogicalDevice(collections.namedtuple("LogicalDevice", ["name", "device_type"])):
    """An initialized device (``tf.config.LogicalDevice``).

    Fields: ``name`` ('/device:GPU:0'), ``device_type`` ('GPU', 'CPU').
    """

    __slots__ = ()


class LogicalDeviceConfiguration(
        collections.namedtuple("LogicalDeviceConfiguration", [
            "memory_limit", "experimental_priority", "experimental_device_ordinal"])):
    """The configuration of one logical device (``tf.config.LogicalDeviceConfiguration``,
    also ``tf.config.experimental.VirtualDeviceConfiguration``).

    Fields:
      memory_limit: the logical device's cap in MB (MiB, 2**20 bytes, as in
        TensorFlow). gpumem also accepts None on a GPU: the device then shares
        equally what the limited ones leave of the GPU's budget.
      experimental_priority: kept for parity; stored, not used by gpumem.
      experimental_device_ordinal: not supported by gpumem (must be None).
    """

    __slots__ = ()

    def __new__(cls, memory_limit=None, experimental_priority=None,
                experimental_device_ordinal=None):
        return super().__new__(cls, memory_limit, experimental_priority,
                               experimental_device_ordinal)


VirtualDeviceConfiguration = LogicalDeviceConfiguration

CPU_PHYSICAL = PhysicalDevice(name="/physical_device:CPU:0", device_type="CPU")

_NAME = re.compile(
    r"^(?:/job:[^/]+)?(?:/replica:\d+)?(?:/task:\d+)?"
    r"/?(?:(?P<kind>physical_device|device):)?"
    r"(?P<type>[A-Za-z_]+):(?P<index>\d+)$")

# The physical table never changes after the runtime is created.
_physical_cache = None


def physical_structs():
    global _physical_cache
    if _physical_cache is None:
        _physical_cache = _lib.list_physical()
    return _physical_cache


def physical_gpus():
    return [PhysicalDevice(name=_lib.text(d.name), device_type="GPU")
            for d in physical_structs()]


def parse_name(name):
    """'/device:GPU:1' -> ('device', 'GPU', 1); None when it is no device name."""
    m = _NAME.match(name.strip())
    if not m:
        return None
    return m.group("kind"), m.group("type").upper(), int(m.group("index"))


def _gpu_range():
    n = len(physical_structs())
    if n == 0:
        return "this machine has no GPU"
    return "this machine has %d GPU%s, GPU:0 to GPU:%d" % (n, "" if n == 1 else "s", n - 1)


def unrecognized(device, why=""):
    """TensorFlow's ValueError for a device that is not one of the machine's."""
    return errors.NoSuchDeviceError(
        "Unrecognized device: %r (gpumem: %s%s)" % (device, why + "; " if why else "",
                                                     _gpu_range()))


_PHYSICAL_ARGUMENT = ("a PhysicalDevice from list_physical_devices() or a device "
                      "name such as 'GPU:0'")
_LOGICAL_ARGUMENT = ("a LogicalDevice from list_logical_devices(), a logical index, "
                     "a device name such as 'GPU:0', or a PhysicalDevice whose GPU "
                     "has one logical device")


def _wrong_type(device, api, takes):
    return errors.UnrecognizedDeviceError(
        "Unrecognized device: %r (gpumem: %s() takes %s, not %s)"
        % (device, api, takes, type(device).__name__))


def resolve_physical(device, api):
    """A physical-device argument -> ('GPU', index) or ('CPU', 0).

    Accepts PhysicalDevice objects (and equal plain tuples) and device-name
    strings, where 'GPU:N' and '/device:GPU:N' name physical GPU N.
    Raises NoSuchDeviceError (a ValueError) for a device that does not exist
    and UnrecognizedDeviceError (TypeError and ValueError) for other types.
    """
    if isinstance(device, LogicalDevice):
        raise unrecognized(device, "%s() configures physical devices; pass one from "
                           "list_physical_devices()" % api)
    if isinstance(device, tuple) and len(device) == 2 and all(
            isinstance(x, str) for x in device):
        if device == CPU_PHYSICAL:
            return "CPU", 0
        for i, gpu in enumerate(physical_gpus()):
            if device == gpu:
                return "GPU", i
        raise unrecognized(device)
    if isinstance(device, str):
        parsed = parse_name(device)
        if parsed is None:
            raise unrecognized(device, "not a device name like 'GPU:0'")
        _kind, device_type, index = parsed
        if device_type == "CPU" and index == 0:
            return "CPU", 0
        if device_type == "GPU" and index < len(physical_structs()):
            return "GPU", index
        raise unrecognized(device)
    raise _wrong_type(device, api, _PHYSICAL_ARGUMENT)


def _c_index(index, device, api):
    """A logical GPU index as the C calls take it: below 0 (-1 is "every device"
    to some of them) or past a C int (ctypes keeps the low 32 bits), it would
    name another device."""
    if not 0 <= index < 2**31:
        raise errors.NoSuchDeviceError(
            "%s(): %r: no such logical device" % (api, device))
    return index


def resolve_logical(device, api):
    """A logical-device argument -> ('GPU', logical index) or ('CPU', index).

    Accepts LogicalDevice objects, device-name strings ('GPU:0' and
    '/device:GPU:0' name logical GPU 0), an int (a logical GPU index), and a
    PhysicalDevice or '/physical_device:GPU:N' when that GPU has exactly one
    logical device. Initializes the runtime only to map a physical device.
    An index within a C int is checked by the C call that uses it.
    """
    if isinstance(device, bool):
        raise _wrong_type(device, api, _LOGICAL_ARGUMENT)
    if isinstance(device, int):
        return "GPU", _c_index(device, device, api)
    if isinstance(device, tuple) and len(device) == 2 and all(
            isinstance(x, str) for x in device):
        name = device[0]
    elif isinstance(device, str):
        name = device
    else:
        try:
            index = operator.index(device)
        except TypeError:
            raise _wrong_type(device, api, _LOGICAL_ARGUMENT) from None
        return "GPU", _c_index(index, device, api)
    parsed = parse_name(name)
    if parsed is None:
        raise errors.NoSuchDeviceError(
            "%s(): %r is not a device name such as 'GPU:0' or '/device:GPU:0'"
            % (api, device))
    kind, device_type, index = parsed
    if device_type == "CPU":
        return "CPU", index
    if device_type != "GPU":
        raise errors.NoSuchDeviceError(
            "%s(): %r: gpumem knows GPU and CPU devices only" % (api, device))
    if kind != "physical_device":
        return "GPU", _c_index(index, device, api)
    on_it = [d.index for d in _lib.list_logical() if d.physical_index == index]
    if len(on_it) != 1:
        if index >= len(physical_structs()):
            raise unrecognized(device)
        raise errors.NoSuchDeviceError(
            "%s(): physical GPU %d has %s logical devices (%s); name one of them, e.g. "
            "'/device:GPU:N'" % (api, index, len(on_it) or "no",
                                 ", ".join("/device:GPU:%d" % i for i in on_it)
                                 or "it is not visible"))
    return "GPU", on_it[0]
