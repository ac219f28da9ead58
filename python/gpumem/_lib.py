"""Loading libgpumem.so with ctypes: where to look, the C structs, the
prototypes, and the status check every call goes through.

Where the library is looked for, in order (the first that loads, has every
function and the expected version wins):

1. ``GPUMEM_LIBRARY``: the file it names, and nothing else when it is set.
2. Beside the package: ``gpumem/libgpumem.so`` (an installed wheel-like copy).
3. Where ``meson install`` put the library, when the package was installed
   with it: the absolute path in ``gpumem/_installed.py``, written at install
   time (the source tree has no such file).
4. The Meson build folder of a source checkout: ``build/lib/libgpumem.so``
   (``python/gpumem`` is two levels below the checkout), then ``build-*/lib``,
   newest first; builds with a sanitizer are skipped (their runtime must be
   loaded first, which a Python process cannot do).
5. The system's library path: ``ctypes.util.find_library('gpumem')``, then the
   soname ``libgpumem.so.1``. ``path`` is then the file the dynamic loader
   opened (asked with ``dladdr``), not the bare name.

If none loads, ``ImportError`` lists every place and why it was passed over.

Every function returning a ``gpumem_status`` has an ``errcheck`` that raises the
exception of its status (``errors.from_status``) with ``gpumem_last_error()``,
read on the calling thread right after the call (the message is thread-local
in C, and ctypes runs errcheck on the same thread). So no status is dropped.
"""

import ctypes
import ctypes.util
import glob
import os

from . import errors

# The library version this package is written against: major and minor must
# match. Before 1.0 a minor release may break the ABI (0.2 put struct_size at the
# head of the structs below, and its soname is libgpumem.so.1); a library file
# found by path carries no soname check, so this check is what refuses a library
# whose structs differ from these.
EXPECTED_VERSION = (0, 2)
SONAME = "libgpumem.so.1"

MIB = 1 << 20


# ------------------------------------------------------------ C structs --


class _Sized(ctypes.Structure):
    """A struct that begins with ``struct_size``, which the caller sets (gpumem.h,
    "Struct sizes"): a new one has it set to its size; ``array(n)`` makes an
    array with every element's set (the library reads the first one's, the size
    of every element)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.struct_size = ctypes.sizeof(self)

    @classmethod
    def array(cls, n):
        arr = (cls * n)()
        for element in arr:
            element.struct_size = ctypes.sizeof(cls)
        return arr


class PhysicalDeviceStruct(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("index", ctypes.c_int),
        ("name", ctypes.c_char * 64),
        ("model", ctypes.c_char * 128),
        ("total_bytes", ctypes.c_uint64),
        ("compute_major", ctypes.c_int),
        ("compute_minor", ctypes.c_int),
        ("uuid", ctypes.c_char * 48),
    ]


class LogicalDeviceConfigStruct(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("memory_limit_bytes", ctypes.c_uint64),
        ("priority", ctypes.c_int),
    ]


class LogicalDeviceStruct(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("index", ctypes.c_int),
        ("name", ctypes.c_char * 64),
        ("physical_index", ctypes.c_int),
        ("memory_limit_bytes", ctypes.c_uint64),
        ("memory_growth", ctypes.c_bool),
    ]


class MemoryInfoStruct(_Sized):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("current_bytes", ctypes.c_uint64),
        ("peak_bytes", ctypes.c_uint64),
        ("reserved_bytes", ctypes.c_uint64),
        ("peak_reserved_bytes", ctypes.c_uint64),
        ("limit_bytes", ctypes.c_uint64),
        ("largest_free_block", ctypes.c_uint64),
        ("num_allocs", ctypes.c_uint64),
        ("num_frees", ctypes.c_uint64),
        ("num_ooms", ctypes.c_uint64),
        # after gpumem 0.2 (left 0 by a library without them: check struct_size)
        ("reserved_total_bytes", ctypes.c_uint64),
        ("freed_total_bytes", ctypes.c_uint64),
        ("live_blocks", ctypes.c_uint64),
        ("peak_live_blocks", ctypes.c_uint64),
        ("num_allocs_total", ctypes.c_uint64),
        ("segments", ctypes.c_uint64),
        ("peak_segments", ctypes.c_uint64),
        ("segments_total", ctypes.c_uint64),
        ("num_alloc_retries", ctypes.c_uint64),
        ("num_sync_all_streams", ctypes.c_uint64),
        ("inactive_split_blocks", ctypes.c_uint64),
        ("peak_inactive_split_blocks", ctypes.c_uint64),
        ("inactive_split_blocks_total", ctypes.c_uint64),
        ("inactive_split_bytes", ctypes.c_uint64),
        ("peak_inactive_split_bytes", ctypes.c_uint64),
        ("inactive_split_bytes_total", ctypes.c_uint64),
    ]


class DriverCallStruct(_Sized):
    """``gpumem_driver_call``: one CUDA driver entry point's calls on a GPU."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("name", ctypes.c_char * 48),
        ("calls", ctypes.c_uint64),
        ("ns", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
    ]


class AllocatorStruct(ctypes.Structure):
    """``gpumem_allocator`` (framework hooks): the struct is its own context."""


ALLOCATE_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(AllocatorStruct), ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p))
DEALLOCATE_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(AllocatorStruct), ctypes.c_void_p)
ALLOCATE_ASYNC_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(AllocatorStruct), ctypes.c_size_t, ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p))
DEALLOCATE_ASYNC_FN = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(AllocatorStruct), ctypes.c_void_p, ctypes.c_void_p)

AllocatorStruct._fields_ = [
    ("struct_size", ctypes.c_uint32),
    ("logical", ctypes.c_int32),
    ("runtime", ctypes.c_void_p),
    ("allocate", ALLOCATE_FN),
    ("deallocate", DEALLOCATE_FN),
    ("allocate_async", ALLOCATE_ASYNC_FN),      # stream-ordered, on `stream`
    ("deallocate_async", DEALLOCATE_ASYNC_FN),
]


# ----------------------------------------------------------- prototypes --

_P = ctypes.POINTER
_RT = ctypes.c_void_p  # gpumem_runtime *; None = the default runtime
_STATUS = "status"     # marks functions that return gpumem_status

# name: (restype, argtypes). Every one must be exported by the library.
_REQUIRED = {
    "gpumem_version": (ctypes.c_uint, []),
    "gpumem_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "gpumem_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "gpumem_last_error": (ctypes.c_char_p, []),
    "gpumem_list_physical_devices": (
        _STATUS, [_RT, _P(PhysicalDeviceStruct), ctypes.c_size_t, _P(ctypes.c_size_t)]),
    "gpumem_set_visible_devices": (_STATUS, [_RT, _P(ctypes.c_int), ctypes.c_size_t]),
    "gpumem_get_visible_devices": (
        _STATUS, [_RT, _P(ctypes.c_int), ctypes.c_size_t, _P(ctypes.c_size_t)]),
    "gpumem_set_memory_growth": (_STATUS, [_RT, ctypes.c_int, ctypes.c_bool]),
    "gpumem_get_memory_growth": (_STATUS, [_RT, ctypes.c_int, _P(ctypes.c_bool)]),
    "gpumem_set_memory_fraction": (_STATUS, [_RT, ctypes.c_int, ctypes.c_double]),
    "gpumem_get_memory_fraction": (_STATUS, [_RT, ctypes.c_int, _P(ctypes.c_double)]),
    "gpumem_set_logical_device_configuration": (
        _STATUS, [_RT, ctypes.c_int, _P(LogicalDeviceConfigStruct), ctypes.c_size_t]),
    "gpumem_get_logical_device_configuration": (
        _STATUS, [_RT, ctypes.c_int, _P(LogicalDeviceConfigStruct), ctypes.c_size_t,
                  _P(ctypes.c_size_t)]),
    "gpumem_initialize": (_STATUS, [_RT]),
    "gpumem_is_initialized": (_STATUS, [_RT, _P(ctypes.c_bool)]),
    "gpumem_get_backend": (_STATUS, [_RT, _P(ctypes.c_int)]),
    "gpumem_list_logical_devices": (
        _STATUS, [_RT, _P(LogicalDeviceStruct), ctypes.c_size_t, _P(ctypes.c_size_t)]),
    "gpumem_malloc": (_STATUS, [_RT, ctypes.c_int, ctypes.c_size_t, _P(ctypes.c_void_p)]),
    "gpumem_free": (_STATUS, [_RT, ctypes.c_void_p]),
    "gpumem_get_memory_info": (_STATUS, [_RT, ctypes.c_int, _P(MemoryInfoStruct)]),
    "gpumem_reset_memory_stats": (_STATUS, [_RT, ctypes.c_int]),
    "gpumem_release_unused": (_STATUS, [_RT, ctypes.c_int, _P(ctypes.c_uint64)]),
    "gpumem_list_driver_calls": (
        _STATUS, [_RT, ctypes.c_int, _P(DriverCallStruct), ctypes.c_size_t,
                  _P(ctypes.c_size_t)]),
    # snapshots (lib/snapshot.c, lib/tag.c)
    "gpumem_snapshot_json": (
        _STATUS, [_RT, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t)]),
    "gpumem_snapshot_file": (_STATUS, [_RT, ctypes.c_int, ctypes.c_char_p]),
    "gpumem_record_history": (_STATUS, [_RT, ctypes.c_size_t]),
    "gpumem_history_trace": (
        _STATUS, [_RT, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, _P(ctypes.c_size_t)]),
    "gpumem_history_trace_file": (_STATUS, [_RT, ctypes.c_int, ctypes.c_char_p]),
    "gpumem_set_tag": (_STATUS, [ctypes.c_char_p]),
    "gpumem_get_tag": (ctypes.c_char_p, []),
    # framework hooks (lib/hooks.c)
    "gpumem_get_allocator": (_STATUS, [_RT, ctypes.c_int, _P(AllocatorStruct)]),
    "gpumem_cuda_device_logical": (_STATUS, [_RT, ctypes.c_int, _P(ctypes.c_int)]),
    "gpumem_torch_malloc": (
        ctypes.c_void_p, [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
    "gpumem_torch_free": (
        None, [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]),
}


def _version_tuple(number):
    return number // 10000, number // 100 % 100, number % 100


def _errcheck(result, func, args):
    if result != 0:
        raise status_error(result)
    return result


def status_error(status):
    """The exception for a failed call's status, with the thread's message."""
    message = lib.gpumem_last_error()
    message = message.decode("utf-8", "replace") if message else ""
    name = lib.gpumem_status_name(status)
    name = name.decode() if name else None
    if not message:
        text = lib.gpumem_status_string(status)
        message = text.decode() if text else "gpumem status %d" % status
    return errors.from_status(status, message, name)


def _bind(cdll):
    """Declares every prototype on cdll; returns the first missing name or None."""
    for name, (restype, argtypes) in _REQUIRED.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            return name
        fn.argtypes = argtypes
        if restype == _STATUS:
            fn.restype = ctypes.c_int
            fn.errcheck = _errcheck
        else:
            fn.restype = restype
    return None


# -------------------------------------------------------------- finding --


def _package_dir():
    return os.path.dirname(os.path.abspath(__file__))


def _sanitized(path):
    """True when the library needs a sanitizer runtime (it names one)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return any(s in data for s in (b"libasan.so", b"libtsan.so", b"libubsan.so"))


def _is_checkout(root):
    """True when `root` is gpumem's source tree (its meson.build names it)."""
    try:
        with open(os.path.join(root, "meson.build"), encoding="utf-8") as f:
            head = f.read(200)
    except OSError:
        return False
    return head.startswith("project('gpumem'") and os.path.isfile(
        os.path.join(root, "include", "gpumem.h"))


def _installed_library():
    """The library path `meson install` wrote into gpumem/_installed.py, or None
    (the source tree, or a copy of it, has no such file)."""
    try:
        from . import _installed
    except ImportError:
        return None
    return getattr(_installed, "LIBRARY", None)


def candidates():
    """(where, path_or_name, skip_reason) in search order, GPUMEM_LIBRARY aside."""
    pkg = _package_dir()
    files = [("beside the package", os.path.join(pkg, name))
             for name in ("libgpumem.so", SONAME)]
    installed = _installed_library()
    if installed:
        files.append(("installed with the package (gpumem/_installed.py)", installed))
    root = os.path.dirname(os.path.dirname(pkg))  # python/gpumem -> checkout
    # Only in gpumem's own checkout: a package copied elsewhere must not load
    # whatever libgpumem.so lies in a build-* folder two levels up (in /tmp,
    # anyone's).
    if _is_checkout(root):
        files.append(("Meson build folder",
                      os.path.join(root, "build", "lib", "libgpumem.so")))
        others = glob.glob(os.path.join(root, "build-*", "lib", "libgpumem.so"))
        others.sort(key=lambda p: os.path.getmtime(p) if os.path.exists(p) else 0,
                    reverse=True)
        files += [("Meson build folder", path) for path in others]
    # A sanitizer's runtime would have to be loaded before Python: loading such a
    # library ends the interpreter instead of raising, so it is passed over.
    out = [(where, path, "built with a sanitizer" if _sanitized(path) else None)
           for where, path in files]
    found = ctypes.util.find_library("gpumem")
    out.append(("system library path (find_library)", found or "libgpumem", None if found
                else "find_library('gpumem') found nothing"))
    out.append(("system library path (soname)", SONAME, None))
    return out


def _try_load(path):
    """(CDLL, None) or (None, reason)."""
    if os.sep in path and not os.path.exists(path):
        return None, "not found"
    try:
        cdll = ctypes.CDLL(path)
    except OSError as e:
        return None, "cannot load: %s" % e
    missing = _bind(cdll)
    if missing:
        return None, "lacks %s() (an older build?)" % missing
    have = _version_tuple(cdll.gpumem_version())
    if have[:2] != EXPECTED_VERSION:
        why = "is version %d.%d.%d; this package needs %d.%d.x" % (have + EXPECTED_VERSION)
        if have[:2] < (0, 2):
            # Its structs lack the leading struct_size: reading them through
            # these would shift every field.
            why += " (0.2 changed the ABI: its structs begin with struct_size; %s)" % SONAME
        return None, why
    return cdll, None


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def _loaded_file(cdll):
    """The file the dynamic loader opened for `cdll` (loaded by a bare name),
    from dladdr() on one of its functions; None where dladdr is not at hand."""
    try:
        dladdr = ctypes.CDLL(None).dladdr  # glibc >= 2.34, musl, macOS: in libc
    except (OSError, AttributeError):
        try:
            dladdr = ctypes.CDLL(ctypes.util.find_library("dl") or "libdl.so.2").dladdr
        except (OSError, AttributeError):
            return None
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    dladdr.restype = ctypes.c_int
    info = _DlInfo()
    address = ctypes.cast(cdll.gpumem_version, ctypes.c_void_p).value
    if not dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    name = os.fsdecode(info.dli_fname)
    return os.path.abspath(name) if os.sep in name else None


def _load():
    tried = []
    env = os.environ.get("GPUMEM_LIBRARY")
    if env:
        cdll, why = _try_load(env)
        if cdll is not None:
            return cdll, env
        raise ImportError(
            "gpumem: GPUMEM_LIBRARY=%s %s. Point GPUMEM_LIBRARY at a libgpumem.so "
            "(build one with `meson setup build && meson compile -C build`), or "
            "unset it to search the usual places." % (env, why))
    tried.append("GPUMEM_LIBRARY: not set")
    seen = set()
    for where, path, skip in candidates():
        if path in seen:
            continue
        seen.add(path)
        if skip:
            tried.append("%s: %s: %s" % (where, path, skip))
            continue
        cdll, why = _try_load(path)
        if cdll is not None:
            if os.sep not in path:
                return cdll, _loaded_file(cdll) or path
            return cdll, path
        tried.append("%s: %s: %s" % (where, path, why))
    raise ImportError(
        "gpumem: cannot find a usable libgpumem.so (version %d.%d). Looked in:\n  %s\n"
        "Build it with `meson setup build && meson compile -C build` in the source "
        "checkout, or set GPUMEM_LIBRARY to the library's path."
        % (EXPECTED_VERSION + ("\n  ".join(tried),)))


lib, path = _load()
version = _version_tuple(lib.gpumem_version())


# -------------------------------------------------------------- helpers --


def text(raw):
    """A C char array as str."""
    return raw.decode("utf-8", "replace")


def list_physical():
    """Every physical GPU as a PhysicalDeviceStruct (a snapshot)."""
    count = ctypes.c_size_t()
    lib.gpumem_list_physical_devices(None, None, 0, ctypes.byref(count))
    arr = PhysicalDeviceStruct.array(max(count.value, 1))
    lib.gpumem_list_physical_devices(None, arr, count.value, ctypes.byref(count))
    return list(arr[:count.value])


def list_logical():
    """Every logical GPU as a LogicalDeviceStruct (initializes the runtime)."""
    count = ctypes.c_size_t()
    lib.gpumem_list_logical_devices(None, None, 0, ctypes.byref(count))
    arr = LogicalDeviceStruct.array(max(count.value, 1))
    lib.gpumem_list_logical_devices(None, arr, count.value, ctypes.byref(count))
    return list(arr[:count.value])


def visible_indices():
    count = ctypes.c_size_t()
    lib.gpumem_get_visible_devices(None, None, 0, ctypes.byref(count))
    arr = (ctypes.c_int * max(count.value, 1))()
    lib.gpumem_get_visible_devices(None, arr, count.value, ctypes.byref(count))
    return list(arr[:count.value])


def logical_config(physical):
    """The logical configuration set for GPU `physical`: [(bytes, priority)]."""
    count = ctypes.c_size_t()
    lib.gpumem_get_logical_device_configuration(None, physical, None, 0,
                                                ctypes.byref(count))
    arr = LogicalDeviceConfigStruct.array(max(count.value, 1))
    lib.gpumem_get_logical_device_configuration(None, physical, arr, count.value,
                                                ctypes.byref(count))
    return [(c.memory_limit_bytes, c.priority) for c in arr[:count.value]]


def driver_calls(physical):
    """The driver calls of physical GPU `physical` (-1: every GPU, summed) as
    {entry point: {'calls', 'ns', 'bytes'}}, every entry point gpumem lists, in
    its order (gpumem_list_driver_calls)."""
    count = ctypes.c_size_t()
    lib.gpumem_list_driver_calls(None, physical, None, 0, ctypes.byref(count))
    arr = DriverCallStruct.array(max(count.value, 1))
    lib.gpumem_list_driver_calls(None, physical, arr, count.value, ctypes.byref(count))
    return {text(e.name): {"calls": e.calls, "ns": e.ns, "bytes": e.bytes}
            for e in arr[:count.value]}


def is_initialized():
    flag = ctypes.c_bool()
    lib.gpumem_is_initialized(None, ctypes.byref(flag))
    return flag.value
