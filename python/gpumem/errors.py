"""Exceptions: one class per gpumem status, each also a built-in exception.

Every C call's status is checked (see ``_lib``); a failure raises the class of
its status with the library's own message (``gpumem_last_error()``). Each class
derives from the built-in exception TensorFlow raises in the same situation,
so code written for ``tf.config`` catches them unchanged:

==============================  =====================================  ==============
status                          class                                  built-in base
==============================  =====================================  ==============
GPUMEM_ERR_INVALID_ARGUMENT     InvalidArgumentError                   ValueError
GPUMEM_ERR_NO_SUCH_DEVICE       NoSuchDeviceError                      ValueError
GPUMEM_ERR_ALREADY_INITIALIZED  AlreadyInitializedError                RuntimeError
GPUMEM_ERR_OUT_OF_MEMORY        OutOfMemoryError (ResourceExhausted)   MemoryError
GPUMEM_ERR_INVALID_POINTER      InvalidPointerError                    ValueError
GPUMEM_ERR_BACKEND              BackendError                           RuntimeError
GPUMEM_ERR_UNSUPPORTED          UnsupportedError                       RuntimeError
==============================  =====================================  ==============

``UnrecognizedDeviceError`` is raised by the Python layer for a device argument
of the wrong type (``set_memory_growth(True, True)``): it is a ``TypeError``,
and also a ``ValueError`` because TensorFlow raises ``ValueError("Unrecognized
device: ...")`` there.

The TensorFlow names of the same conditions are aliases:
``ResourceExhaustedError`` (out of memory), ``FailedPreconditionError``
(already initialized), ``NotFoundError`` (no such device), ``InternalError``
(backend) and ``UnimplementedError`` (unsupported).
"""

__all__ = [
    "GpumemError",
    "InvalidArgumentError",
    "NoSuchDeviceError",
    "AlreadyInitializedError",
    "OutOfMemoryError",
    "InvalidPointerError",
    "BackendError",
    "UnsupportedError",
    "UnrecognizedDeviceError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "NotFoundError",
    "InternalError",
    "UnimplementedError",
]

# gpumem_status values (include/gpumem.h); stable, never renumbered.
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_NO_SUCH_DEVICE = 2
ERR_ALREADY_INITIALIZED = 3
ERR_OUT_OF_MEMORY = 4
ERR_INVALID_POINTER = 5
ERR_BACKEND = 6
ERR_UNSUPPORTED = 7


class GpumemError(Exception):
    """Base of every gpumem exception.

    ``status`` is the C status number (None for errors found in Python) and
    ``status_name`` its enumerator (``"GPUMEM_ERR_OUT_OF_MEMORY"``).
    """

    status = None
    status_name = None

    def __init__(self, message, status=None, status_name=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        if status_name is not None:
            self.status_name = status_name


class InvalidArgumentError(GpumemError, ValueError):
    """A bad value or a contradictory configuration (GPUMEM_ERR_INVALID_ARGUMENT)."""

    status = ERR_INVALID_ARGUMENT
    status_name = "GPUMEM_ERR_INVALID_ARGUMENT"


class NoSuchDeviceError(GpumemError, ValueError):
    """A device index out of range or not visible (GPUMEM_ERR_NO_SUCH_DEVICE)."""

    status = ERR_NO_SUCH_DEVICE
    status_name = "GPUMEM_ERR_NO_SUCH_DEVICE"


class AlreadyInitializedError(GpumemError, RuntimeError):
    """A configuration change after the devices were initialized
    (GPUMEM_ERR_ALREADY_INITIALIZED)."""

    status = ERR_ALREADY_INITIALIZED
    status_name = "GPUMEM_ERR_ALREADY_INITIALIZED"


class OutOfMemoryError(GpumemError, MemoryError):
    """A logical device's budget, the GPU or host memory is exhausted
    (GPUMEM_ERR_OUT_OF_MEMORY); TensorFlow calls it ResourceExhaustedError."""

    status = ERR_OUT_OF_MEMORY
    status_name = "GPUMEM_ERR_OUT_OF_MEMORY"


class InvalidPointerError(GpumemError, ValueError):
    """A free of a pointer gpumem did not return, or a double free
    (GPUMEM_ERR_INVALID_POINTER)."""

    status = ERR_INVALID_POINTER
    status_name = "GPUMEM_ERR_INVALID_POINTER"


class BackendError(GpumemError, RuntimeError):
    """The driver failed; the message names the call and its code
    (GPUMEM_ERR_BACKEND)."""

    status = ERR_BACKEND
    status_name = "GPUMEM_ERR_BACKEND"


class UnsupportedError(GpumemError, RuntimeError):
    """Not available with this backend or build (GPUMEM_ERR_UNSUPPORTED)."""

    status = ERR_UNSUPPORTED
    status_name = "GPUMEM_ERR_UNSUPPORTED"


class UnrecognizedDeviceError(GpumemError, TypeError, ValueError):
    """A device argument of a type that names no device (found in Python)."""


ResourceExhaustedError = OutOfMemoryError
FailedPreconditionError = AlreadyInitializedError
NotFoundError = NoSuchDeviceError
InternalError = BackendError
UnimplementedError = UnsupportedError

_BY_STATUS = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        NoSuchDeviceError,
        AlreadyInitializedError,
        OutOfMemoryError,
        InvalidPointerError,
        BackendError,
        UnsupportedError,
    )
}


def from_status(status, message, status_name=None):
    """The exception for C status ``status`` with ``message``.

    An unknown status (a newer library) gives a plain GpumemError, which is
    still raised: no status is ever dropped.
    """
    cls = _BY_STATUS.get(status)
    if cls is None:
        return GpumemError(
            "%s (gpumem status %d)" % (message, status), status, status_name
        )
    return cls(message, status, status_name)
