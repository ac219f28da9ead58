"""``gpumem.config.experimental``: TensorFlow's ``tf.config.experimental``
names, including its deprecated aliases (``set_virtual_device_configuration``,
``VirtualDeviceConfiguration``, ``list_physical_devices``, ...)."""

from .._config import (get_device_details, get_logical_device_configuration,
                       get_memory_growth, get_memory_info, get_memory_usage,
                       get_visible_devices, list_logical_devices, list_physical_devices,
                       reset_memory_stats, set_logical_device_configuration,
                       set_memory_growth, set_visible_devices)
from .._devices import VirtualDeviceConfiguration

# TensorFlow's older names for logical devices.
set_virtual_device_configuration = set_logical_device_configuration
get_virtual_device_configuration = get_logical_device_configuration

__all__ = [
    "VirtualDeviceConfiguration",
    "get_device_details",
    "get_memory_growth",
    "get_memory_info",
    "get_memory_usage",
    "get_virtual_device_configuration",
    "get_visible_devices",
    "list_logical_devices",
    "list_physical_devices",
    "reset_memory_stats",
    "set_memory_growth",
    "set_virtual_device_configuration",
    "set_visible_devices",
]
