"""Snapshots of gpumem's memory that PyTorch's memory viewer opens.

``snapshot()`` returns, as a dict, every segment (region) of the default
runtime's pools with every chunk in address order, in the structure of
``torch.cuda.memory._snapshot()``; ``dump_snapshot(path)`` writes it as a
pickle, as ``torch.cuda.memory._dump_snapshot`` does, which
https://pytorch.org/memory_viz and ``python -m torch.cuda._memory_viz`` read
(a path ending in ``.json`` gets JSON, which the viewer does not read: ``python3
-m gpumem.map snap.json -o snap.pickle`` turns it into the pickle).
``tag(label)`` labels the allocations a block of code makes, in snapshots and
out-of-memory messages. ``record_history(n)`` keeps each logical device's last
n events (PyTorch's ``_record_memory_history``), which snapshots show as
``device_traces``; ``dump_trace(path)`` writes them as an allocation trace
that ``gpumem-replay`` replays. The format is in docs/snapshot.md.
"""

import contextlib
import ctypes
import io
import json
import pickle
import sys

from . import _devices, _files, _lib, errors

# The pickle protocol the web viewer's own unpickler reads (it takes 2 to 4 and
# a subset of the opcodes, which protocol 4 of the standard library keeps to
# for dicts, lists, str, int, bool and None).
PICKLE_PROTOCOL = 4


def _logical_index(device, api="snapshot"):
    """None: -1 (every logical device); else what gpumem.malloc takes for its
    ``device`` (a LogicalDevice, 'GPU:0', '/device:GPU:1', a logical index),
    through the same parser."""
    if device is None:
        return -1
    kind, logical = _devices.resolve_logical(device, api)
    if kind != "GPU":
        raise errors.InvalidArgumentError(
            "%s(): gpumem manages GPU memory; %r is a CPU" % (api, device))
    return logical


def _two_calls(fn, device):
    """The text of a two-call C function (gpumem_snapshot_json's idiom)."""
    logical = _logical_index(device)
    length = ctypes.c_size_t()
    fn(None, logical, None, 0, ctypes.byref(length))
    while True:
        # room for what other threads may allocate before the second call
        capacity = length.value + length.value // 8 + 4096
        buf = ctypes.create_string_buffer(capacity)
        try:
            fn(None, logical, buf, capacity, ctypes.byref(length))
        except errors.InvalidArgumentError:
            if length.value <= capacity:
                raise
            continue  # it grew past the room: once more, with its new size
        return buf.value.decode("utf-8", "replace")


def snapshot_json(device=None):
    """The snapshot's JSON text, as the C call gpumem_snapshot_json writes it."""
    return _two_calls(_lib.lib.gpumem_snapshot_json, device)


def record_history(max_entries=100000):
    """Keeps each logical device's last `max_entries` events (allocations, frees,
    regions taken and given back, out of memory) for snapshots' device_traces and
    for dump_trace; 0 turns it off. Calling again re-sizes the histories and keeps
    their newest events. PyTorch's torch.cuda.memory._record_memory_history."""
    if isinstance(max_entries, bool) or not isinstance(max_entries, int):
        raise TypeError("max_entries must be an int, not %r" % (max_entries,))
    if max_entries < 0:
        raise ValueError("max_entries must be 0 (off) or more, not %d" % max_entries)
    _lib.lib.gpumem_record_history(None, max_entries)


def history_trace(device=None):
    """The event history of logical device `device` (None: all of them, merged by
    time) as an allocation trace (``a ID SIZE``, ``f ID``), gpumem-replay's input."""
    return _two_calls(_lib.lib.gpumem_history_trace, device)


def dump_trace(path, device=None):
    """Writes history_trace(device) to `path`, for ``gpumem-replay PATH``."""
    _lib.lib.gpumem_history_trace_file(None, _logical_index(device),
                                       str(path).encode("utf-8"))


def snapshot(device=None):
    """Every segment and chunk of logical device `device` (None: all of them) as
    a dict in the structure of torch.cuda.memory._snapshot()."""
    return json.loads(snapshot_json(device))


def dump_snapshot(path, device=None):
    """Writes snapshot(device) to `path`: a pickle (what PyTorch's viewer and
    ``python -m torch.cuda._memory_viz`` read), or JSON when the path ends in
    ``.json``; whole or not at all, never through a symbolic link at `path`
    (gpumem_snapshot_file's rules). Returns the dict written."""
    data = snapshot(device)
    if str(path).endswith(".json"):
        _files.write_whole(path, json.dumps(data).encode("utf-8"))
    else:
        _files.write_whole(path, pickle.dumps(data, protocol=PICKLE_PROTOCOL))
    return data


class _NoGlobals(pickle.Unpickler):
    """A snapshot holds only dicts, lists and scalars: refuse anything else, so
    that loading a snapshot from elsewhere runs no code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("a gpumem snapshot holds no %s.%s" % (module, name))


def load_snapshot(path):
    """A snapshot written by dump_snapshot (pickle or JSON), or by PyTorch."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:1] == b"\x80":
        return _NoGlobals(io.BytesIO(raw)).load()
    return json.loads(raw.decode("utf-8"))


def set_tag(label):
    """Labels the calling thread's next allocations with `label` (None: none)."""
    _lib.lib.gpumem_set_tag(None if label is None else str(label).encode("utf-8"))


def get_tag():
    """The calling thread's label, or None."""
    raw = _lib.lib.gpumem_get_tag()
    return raw.decode("utf-8", "replace") if raw else None


@contextlib.contextmanager
def tag(label=None):
    """Labels the allocations made inside the block (this thread's) with `label`,
    or without one with the caller's frame ('file.py:42 in forward'); the label
    before is put back after."""
    if label is None:
        frame = sys._getframe(2)  # the with statement's frame (contextmanager adds one)
        code = frame.f_code
        label = "%s:%d in %s" % (code.co_filename.rsplit("/", 1)[-1], frame.f_lineno,
                                 code.co_name)
    before = get_tag()
    set_tag(label)
    try:
        yield label
    finally:
        set_tag(before)
