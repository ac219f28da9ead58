"""``gpumem.config``: TensorFlow's ``tf.config`` GPU-configuration names.

Code written for TensorFlow's device configuration runs after changing only
its import (``import gpumem as tf``)::

    gpus = tf.config.list_physical_devices('GPU')
    tf.config.experimental.set_memory_growth(gpus[0], True)
    tf.config.set_logical_device_configuration(
        gpus[1], [tf.config.LogicalDeviceConfiguration(memory_limit=2048)])
    print(tf.config.list_logical_devices('GPU'))

``gpumem.config.experimental`` holds the ``tf.config.experimental`` names.
See docs/python.md for what gpumem does differently (it lifts TensorFlow's
restrictions that come from its internals).
"""

from .._config import (get_logical_device_configuration, get_visible_devices,
                       list_logical_devices, list_physical_devices,
                       set_logical_device_configuration, set_visible_devices)
from .._devices import (LogicalDevice, LogicalDeviceConfiguration, PhysicalDevice)
from . import experimental

__all__ = [
    "LogicalDevice",
    "LogicalDeviceConfiguration",
    "PhysicalDevice",
    "experimental",
    "get_logical_device_configuration",
    "get_visible_devices",
    "list_logical_devices",
    "list_physical_devices",
    "set_logical_device_configuration",
    "set_visible_devices",
]
