"""Snapshots (issue 24): gpumem.snapshot() and dump_snapshot() against a schema
and against the rules PyTorch's memory viewer (torch/utils/viz/MemoryViz.js,
torch/cuda/_memory_viz.py) relies on, the pickle the viewer's own unpickler
reads, a snapshot taken while eight threads allocate, the out-of-memory
snapshot and message, the map (SVG, HTML) and the HTML page in a real headless
browser; the event history in device_traces against the viewer's rules (its
backward walk from the snapshot's state, MemoryViz.js's simulate_memory) and
against the snapshot (a forward walk from nothing ends at the snapshot's
chunks), also while eight threads allocate; the history's trace replayed by
gpumem-replay to the same peak. On simulated GPUs and on the CUDA driver double.
"""

import json
import os
import pickle
import pickletools
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib

import pytest

from conftest import PYTHON_DIR, driver_double, run, scenario_env

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (active_pending_free: freed on a stream whose work has not completed yet)
STATES = {"active_allocated", "active_pending_free", "inactive"}
# What PyTorch's snapshot has, and the viewer or _memory_viz reads.
SEGMENT_KEYS = {"device": int, "address": int, "total_size": int, "allocated_size": int,
                "active_size": int, "requested_size": int, "stream": int,
                "segment_type": str, "segment_pool_id": list, "is_expandable": bool,
                "frames": list, "blocks": list,
                # gpumem's own
                "kind": str, "physical_device": int}
BLOCK_KEYS = {"address": int, "size": int, "requested_size": int, "state": str,
              "frames": list, "seq": int, "stream": int}
DEVICE_KEYS = {"device": int, "name": str, "physical_device": int, "budget": int,
               "budget_reason": str, "memory_growth": bool, "in_use": int,
               "peak_in_use": int, "reserved": int, "peak_reserved": int, "cached": int,
               "largest_free_block": int, "num_allocs": int, "num_frees": int,
               "num_ooms": int, "driver_calls": dict}
# The opcodes MemoryViz.js's unpickler reads (its unpickleData switch).
VIEWER_OPCODES = {"PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE",
                  "NONE", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT",
                  "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK", "MEMOIZE",
                  "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT",
                  "SHORT_BINUNICODE", "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1",
                  "TUPLE2", "TUPLE3", "BINFLOAT"}


# The trace actions the viewer draws (MemoryViz.js: simulate_memory,
# annotate_snapshot, process_alloc_data; torch/cuda/_memory_viz.py: trace).
TRACE_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc",
                 "segment_free", "segment_map", "segment_unmap", "oom"}
EVENT_KEYS = {"action": str, "addr": int, "size": int, "stream": int, "time_us": int,
              "frames": list}


def _carve(segs, addr, size):
    """Takes [addr, addr + size) out of the segment holding it (the viewer's
    unmap_segment with merge); fails when no segment holds it."""
    for i, (a, n) in enumerate(segs):
        if a <= addr and addr + size <= a + n:
            rest = [(a, addr - a), (addr + size, a + n - addr - size)]
            segs[i:i + 1] = [r for r in rest if r[1] > 0]
            return
    raise AssertionError("segment_map of [%#x, +%d) outside every segment %s"
                         % (addr, size, segs))


def _join(segs, addr, size):
    """Puts [addr, addr + size) back, joined with the segments it touches (the
    viewer's map_segment with merge)."""
    for a, n in segs:
        assert addr + size <= a or a + n <= addr, "segment_unmap over a live segment"
    segs.append((addr, size))
    segs.sort()
    joined = []
    for a, n in segs:
        if joined and joined[-1][0] + joined[-1][1] == a:
            joined[-1] = (joined[-1][0], joined[-1][1] + n)
        else:
            joined.append((a, n))
    segs[:] = joined


def check_traces(snap, from_start=False):
    """Each device's trace against the viewer's rules: its fields, its actions,
    times in order, and the viewer's walk backwards from the snapshot's state
    (each lookup it makes must find what it looks for, or it breaks). With
    from_start (the history was on from before the first event and dropped
    none), a walk forwards from nothing must end at the snapshot's chunks and
    reserved bytes. Returns the number of events."""
    total = 0
    for dev, trace in enumerate(snap["device_traces"]):
        total += len(trace)
        for e in trace:
            for key, kind in EVENT_KEYS.items():
                assert isinstance(e[key], kind), (key, e)
            assert e["action"] in TRACE_ACTIONS, e
            assert e["size"] > 0, e
            if e["action"] == "oom":
                assert isinstance(e["device_free"], int)
            for f in e["frames"]:
                assert set(f) == {"filename", "line", "name"}
        times = [e["time_us"] for e in trace]
        assert times == sorted(times)
        segs = sorted((s["address"], s["total_size"]) for s in snap["segments"]
                      if s["device"] == dev)
        live = {}
        for s in snap["segments"]:
            addr = s["address"]
            for b in s["blocks"]:
                # the viewer's block_map: active_allocated and active_pending_free
                if s["device"] == dev and b["state"] != "inactive":
                    live[addr] = b["size"]
                addr += b["size"]
        at_end = dict(live)
        # backwards, as simulate_memory does from the last event to the first
        for e in reversed(trace):
            a, n, act = e["addr"], e["size"], e["action"]
            if act == "free_completed":
                assert a not in live, e
                live[a] = n
            elif act == "free_requested":
                assert live.get(a) == n, e  # the viewer reads l_block_map[addr]
            elif act == "alloc":
                assert live.pop(a, None) == n, e
            elif act == "segment_free":
                assert all(a + n <= x or x + m <= a for x, m in segs), e
                segs.append((a, n))
                segs.sort()
            elif act == "segment_alloc":
                assert (a, n) in segs, e  # found by its address, whole
                segs.remove((a, n))
            elif act == "segment_unmap":
                _join(segs, a, n)
            elif act == "segment_map":
                _carve(segs, a, n)
        for a, n in live.items():  # what was live before the first event
            assert any(x <= a and a + n <= x + m for x, m in segs), (a, n, segs)
        if not from_start:
            continue
        # forwards from nothing: the events alone make the snapshot's state
        assert not live and not segs, (live, segs)
        blocks, reserved, asked = {}, 0, {}
        for e in trace:
            a, n, act = e["addr"], e["size"], e["action"]
            if act == "alloc":
                assert a not in blocks, e
                blocks[a] = n
                assert 0 < e["requested_size"] <= n
            elif act == "free_requested":
                assert blocks.get(a) == n and a not in asked, e
                asked[a] = n
            elif act == "free_completed":
                assert blocks.pop(a) == n and asked.pop(a) == n, e
            elif act in ("segment_alloc", "segment_map"):
                reserved += n
            elif act in ("segment_free", "segment_unmap"):
                reserved -= n
        assert blocks == at_end
        assert reserved == sum(s["total_size"] for s in snap["segments"]
                               if s["device"] == dev)
    return total


def check_snapshot(snap):
    """The schema, and the viewer's rules; returns {device: bytes in use}."""
    assert snap["format"] == "gpumem-snapshot" and snap["version"] == 1
    assert isinstance(snap["device_traces"], list)
    for trace in snap["device_traces"]:
        assert isinstance(trace, list)
        # annotate_snapshot: a category needs 'unknown' among them (its
        # push of 'unknown' is misspelt, so the entry must be there already)
        cats = {t["category"] for t in trace if "category" in t}
        assert not cats or "unknown" in cats
    used = {}
    for seg in snap["segments"]:
        for key, kind in SEGMENT_KEYS.items():
            assert isinstance(seg[key], kind), (key, seg[key])
        assert seg["kind"] in ("greedy", "growth", "vmm")
        assert seg["is_expandable"] == (seg["kind"] == "vmm")
        # the viewer lists a device by its index into device_traces
        assert 0 <= seg["device"] < len(snap["device_traces"])
        # blocks tile the segment: the viewer recomputes each address from the
        # sizes before it, so the stored ones must agree
        addr = seg["address"]
        allocated = active = requested = 0
        for b in seg["blocks"]:
            for key, kind in BLOCK_KEYS.items():
                assert isinstance(b[key], kind), (key, b[key])
            assert b["state"] in STATES
            assert b["address"] == addr
            assert b["size"] > 0 and b["size"] % 256 == 0
            if b["state"] != "inactive":
                assert 0 < b["requested_size"] <= b["size"] < b["requested_size"] + 256
                assert b["seq"] > 0
                active += b["size"]
                requested += b["requested_size"]
                if b["state"] == "active_allocated":
                    allocated += b["size"]
            else:
                assert b["requested_size"] == 0 and b["seq"] == 0
            for f in b["frames"]:
                assert set(f) == {"filename", "line", "name"}
            addr += b["size"]
        assert addr == seg["address"] + seg["total_size"]
        # as PyTorch's: a pending block is active, no longer allocated
        assert seg["allocated_size"] == allocated and seg["active_size"] == active
        assert seg["requested_size"] == requested
        used[seg["device"]] = used.get(seg["device"], 0) + active
    for d in snap["devices"]:
        for key, kind in DEVICE_KEYS.items():
            assert isinstance(d[key], kind), (key, d[key])
        assert d["cached"] == d["reserved"] - d["in_use"]
        # its GPU's driver calls: the entry points called, each with its figures
        assert d["driver_calls"], d
        for name, c in d["driver_calls"].items():
            assert name.startswith("cu") and set(c) == {"calls", "ns", "bytes"}, (name, c)
            assert c["calls"] > 0 and all(isinstance(v, int) for v in c.values()), c
    return used


SCENARIO = """
    import gpumem, json, sys
    gpus = gpumem.config.list_physical_devices('GPU')
    gpumem.config.experimental.set_memory_growth(gpus[0], True)
    bufs = []
    with gpumem.tag('weights'):
        bufs += [gpumem.malloc(16 << 20, 0) for _ in range(4)]
    with gpumem.tag() as label:
        bufs += [gpumem.malloc(1000 + i, 0) for i in range(40)]
    bufs += [gpumem.malloc(3 << 20, 1) for _ in range(3)]
    for i in (1, 6, 7, 30, 45):
        bufs[i].free()
    snap = gpumem.dump_snapshot(sys.argv[1] if len(sys.argv) > 1 else OUT)
    json.dump({'snap': snap, 'label': label,
               'info': [gpumem.config.experimental.get_memory_info('GPU:%d' % i)
                        for i in (0, 1)]}, sys.stdout)
"""


def run_scenario(tmp_path, env=None, name="snap.pickle"):
    out = str(tmp_path / name)
    got = json.loads(run("OUT = %r\n" % out + SCENARIO.replace("\n    ", "\n"),
                         env=env))
    return got, out


def test_snapshot_follows_the_schema_and_the_viewers_rules(tmp_path):
    got, path = run_scenario(tmp_path)
    snap = got["snap"]
    used = check_snapshot(snap)
    assert len(snap["device_traces"]) == 2 and snap["device_traces"] == [[], []]
    for i in (0, 1):
        assert used[i] == got["info"][i]["current"]
    kinds = {s["device"]: s["kind"] for s in snap["segments"]}
    assert kinds == {0: "vmm", 1: "greedy"}  # the simulated GPU maps growth into a range
    blocks = [b for s in snap["segments"] if s["device"] == 0 for b in s["blocks"]]
    tags = [b["tag"] for b in blocks if b["state"] == "active_allocated"]
    assert tags.count("weights") == 3  # one of four freed
    assert got["label"].startswith("<string>:") and got["label"].endswith("in <module>")
    assert tags.count(got["label"]) == 37  # 6, 7 and 30 of 40 freed
    seqs = sorted(b["seq"] for b in blocks if b["state"] == "active_allocated")
    assert seqs == sorted(set(seqs)) and seqs[0] == 1
    assert any(b["state"] == "inactive" for b in blocks)
    tagged = next(b for b in blocks if b.get("tag") == "weights")
    assert tagged["frames"] == [{"filename": "weights", "line": 0,
                                 "name": "gpumem_set_tag"}]
    assert snap["devices"][0]["name"] == "/device:GPU:0"


def test_the_pickle_is_the_dict_in_opcodes_the_viewer_reads(tmp_path):
    got, path = run_scenario(tmp_path)
    with open(path, "rb") as f:
        raw = f.read()
    assert pickle.loads(raw) == got["snap"]
    used = {op.name for op, _, _ in pickletools.genops(raw)}
    assert used <= VIEWER_OPCODES, used - VIEWER_OPCODES
    # and the JSON form, which the web viewer tries first
    got2, path2 = run_scenario(tmp_path, name="snap.json")
    with open(path2) as f:
        assert json.load(f) == got2["snap"]


def test_one_logical_device_and_a_short_buffer():
    out = run("""
        import ctypes, json, gpumem
        from gpumem import _lib, errors
        keep = [gpumem.malloc(1 << 20, 1) for _ in range(3)]
        one = gpumem.snapshot(1)
        assert {s['device'] for s in one['segments']} == {1}, one['segments']
        assert [d['device'] for d in one['devices']] == [1]
        assert len(one['device_traces']) == 2
        assert gpumem.snapshot('/device:GPU:1') == one
        # the device as gpumem.malloc takes it, through the same parser (issue 32)
        assert gpumem.snapshot('GPU:1') == one
        assert gpumem.snapshot(gpumem.config.list_logical_devices('GPU')[1]) == one
        snapshots = __import__('sys').modules['gpumem.snapshot']  # the module
        assert snapshots.history_trace('GPU:1') == snapshots.history_trace(1)
        try:
            gpumem.snapshot(1.5)
        except TypeError as e:
            assert 'snapshot() takes' in str(e), e
        else:
            raise AssertionError('a float was taken for a device')
        n = ctypes.c_size_t()
        _lib.lib.gpumem_snapshot_json(None, 1, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(100)
        try:
            _lib.lib.gpumem_snapshot_json(None, 1, buf, 100, ctypes.byref(n))
        except errors.InvalidArgumentError as e:
            assert 'holds 100' in str(e), e
        else:
            raise AssertionError('a short buffer was accepted')
        assert n.value > 100 and buf.value == b''
        buf = ctypes.create_string_buffer(n.value)
        _lib.lib.gpumem_snapshot_json(None, 1, buf, n.value, ctypes.byref(n))
        assert len(buf.value) + 1 == n.value
        json.loads(buf.value)
        try:
            gpumem.snapshot(2)
        except errors.NoSuchDeviceError as e:
            print('refused:', e)
        """)
    assert "refused: gpumem_snapshot_json(/device:GPU:2): no such logical device" in out


def test_snapshots_while_eight_threads_allocate_are_consistent():
    out = run("""
        import random, sys, threading, gpumem
        sys.path.insert(0, %r)
        from test_snapshot import check_snapshot
        gpus = gpumem.config.list_physical_devices('GPU')
        gpumem.config.experimental.set_memory_growth(gpus[0], True)
        stop = threading.Event()
        def churn(i):
            rng = random.Random(i)
            held = []
            with gpumem.tag('thread-%%d' %% i):
                while not stop.is_set():
                    if held and rng.random() < 0.5:
                        held.pop(rng.randrange(len(held))).free()
                    else:
                        held.append(gpumem.malloc(rng.randint(1, 1 << 18), 0))
        threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        most = 0
        for _ in range(60):
            snap = gpumem.snapshot(0)
            check_snapshot(snap)
            live = [b for s in snap['segments'] for b in s['blocks']
                    if b['state'] == 'active_allocated']
            assert all(b['tag'].startswith('thread-') for b in live)
            most = max(most, len(live))
        stop.set()
        for t in threads:
            t.join()
        print('most', most)
        """ % os.path.dirname(os.path.abspath(__file__)))
    assert int(out.split()[-1]) > 8


def test_snapshot_on_the_driver_double(tmp_path):
    env = {"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": driver_double(),
           "FAKECUDA_DEVICES": "Fake GPU:4GiB:8.0,Fake GPU:4GiB:8.0"}
    got, path = run_scenario(tmp_path, env=env)
    used = check_snapshot(got["snap"])
    assert used[0] == got["info"][0]["current"]
    # the double has the driver's virtual memory management: a growing pool maps
    # its regions side by side into its range, and they form one segment
    segs = [s for s in got["snap"]["segments"] if s["device"] == 0]
    assert [s["kind"] for s in segs] == ["vmm"], segs
    assert segs[0]["is_expandable"]
    assert {s["kind"] for s in got["snap"]["segments"] if s["device"] == 1} == {"greedy"}


def test_out_of_memory_writes_a_snapshot_and_explains_itself(tmp_path):
    path = str(tmp_path / "oom.json")
    out = run("""
        import gpumem
        from gpumem import errors
        gpu = gpumem.config.list_physical_devices('GPU')[0]
        gpumem.config.set_logical_device_configuration(
            gpu, [gpumem.config.LogicalDeviceConfiguration(memory_limit=1024)])
        with gpumem.tag('activations'):
            keep = [gpumem.malloc(200 << 20, 0) for _ in range(4)]
        keep[1].free()
        try:
            gpumem.malloc(900 << 20, 0)
        except errors.OutOfMemoryError as e:
            print(e)
        else:
            raise AssertionError('no out of memory')
        """, gpus="4GiB", env={"GPUMEM_OOM_SNAPSHOT": path})
    # a greedy budget of 1 GiB: 600 MiB in use, 424 MiB cached in two pieces
    # (the freed 200 MiB and the untouched 224 MiB end), neither of 900 MiB
    assert "budget 1.00 GiB" in out, out
    assert "cached 424.00 MiB, largest free block 224.00 MiB" in out, out
    assert "unusable for this request 424.00 MiB" in out, out
    assert "largest live: 200.00 MiB 'activations'" in out, out
    with open(path) as f:
        snap = json.load(f)
    used = check_snapshot(snap)
    assert used[0] == 600 << 20


def test_the_map_is_well_formed_svg_and_html(tmp_path):
    got, path = run_scenario(tmp_path)
    svg, page = str(tmp_path / "map.svg"), str(tmp_path / "map.html")
    for out in (svg, page):
        subprocess.run([sys.executable, "-m", "gpumem.map", path, "-o", out],
                       env=scenario_env(), check=True, timeout=60)
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ns = {"s": "http://www.w3.org/2000/svg"}
    segments = root.findall(".//s:g[@class='segment']", ns)
    assert len(segments) == len(got["snap"]["segments"])
    assert len(root.findall(".//s:rect[@class='largest-free']", ns)) == len(segments)
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "tag weights" in text and "largest free" in text
    with open(page) as f:
        html_text = f.read()
    # the SVG inside the page is the same drawing, and well-formed too
    start, end = html_text.index("<svg"), html_text.index("</svg>") + len("</svg>")
    ET.fromstring(html_text[start:end])
    assert html_text.count("<tr><td>/device:GPU:") == 20


def test_the_map_writes_the_json_as_the_viewers_pickle(tmp_path):
    # gpumem_snapshot_file and GPUMEM_OOM_SNAPSHOT write JSON; the viewer reads
    # pickles only
    got, path = run_scenario(tmp_path, env={"GPUMEM_RECORD_HISTORY": "1000"},
                             name="snap.json")
    out = str(tmp_path / "snap.pickle")
    subprocess.run([sys.executable, "-m", "gpumem.map", path, "-o", out],
                   env=scenario_env(), check=True, timeout=60)
    with open(out, "rb") as f:
        raw = f.read()
    assert pickle.loads(raw) == got["snap"] and got["snap"]["device_traces"][0]
    used = {op.name for op, _, _ in pickletools.genops(raw)}
    assert used <= VIEWER_OPCODES, used - VIEWER_OPCODES


def test_the_map_draws_a_pending_block_as_memory_in_use():
    sys.path.insert(0, PYTHON_DIR)
    from gpumem import map as gmap
    mib = 1 << 20

    def block(state, size, requested):
        return {"size": size, "requested_size": requested, "state": state,
                "seq": 1 if requested else 0, "stream": 7, "frames": []}
    # 1 MiB allocated, 4 MiB freed on stream 7 and waiting, 3 MiB free
    snap = {"segments": [{"device": 0, "address": 1 << 30, "total_size": 8 * mib,
                          "kind": "growth", "blocks": [
                              block("active_allocated", mib, mib),
                              block("active_pending_free", 4 * mib, 4 * mib),
                              block("inactive", 3 * mib, 0)]}]}
    root = ET.fromstring(gmap.render_svg(snap))
    svg = "{http://www.w3.org/2000/svg}"
    fills = [r.get("fill") for r in root.iter(svg + "rect")]
    assert gmap.PENDING in fills and gmap.PENDING not in (gmap.FREE, gmap.UNTAGGED)
    text = " ".join(t.text or "" for t in root.iter(svg + "text"))
    # the pending block is not free memory: in use, and not the largest free block
    assert "5.00 MiB used, 3.00 MiB free" in text, text
    assert "largest free 3.00 MiB" in text, text
    assert "5.00 MiB in use of 8.00 MiB reserved" in text, text
    assert "freed, waiting for its stream" in text


CHROMIUM = "/usr/bin/chromium"


def _png_colours(path):
    """How many distinct pixel rows a PNG has (standard library only)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        kind = data[pos + 4:pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)))


@pytest.mark.skipif(not os.path.exists(CHROMIUM),
                    reason="no headless browser: %s is missing (apt-get install "
                           "chromium)" % CHROMIUM)
def test_the_page_renders_in_a_headless_browser(tmp_path):
    got, path = run_scenario(tmp_path)
    page = str(tmp_path / "map.html")
    subprocess.run([sys.executable, "-m", "gpumem.map", path, "-o", page],
                   env=scenario_env(), check=True, timeout=60)
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", "--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(flags + ["--dump-dom", "file://" + page], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    # what the browser built from the page: the drawing and the table
    assert "<svg" in dom.stdout and 'class="largest-free"' in dom.stdout
    assert dom.stdout.count("<tr><td>/device:GPU:") == 20
    png = str(tmp_path / "map.png")
    shot = subprocess.run(flags + ["--window-size=1300,900", "--screenshot=" + png,
                                   "file://" + page],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and os.path.exists(png), shot.stderr
    assert _png_colours(png) > 50  # drawn, not a blank page
    if os.environ.get("GPUMEM_MAP_SCREENSHOT"):  # docs/images/map.png
        shutil.copy(png, os.environ["GPUMEM_MAP_SCREENSHOT"])


# ----------------------------------------------------------- the history --

def test_the_history_in_a_snapshot_follows_the_viewers_rules(tmp_path):
    got, path = run_scenario(tmp_path, env={"GPUMEM_RECORD_HISTORY": "100000"})
    snap = got["snap"]
    check_snapshot(snap)
    assert check_traces(snap, from_start=True) > 50
    actions = [{e["action"] for e in t} for t in snap["device_traces"]]
    # growing on 0, the budget taken at initialization on 1 (regions of a
    # simulated GPU join their neighbours: segment_map)
    for a in actions:
        assert a == {"segment_map", "alloc", "free_requested", "free_completed"}
    assert sum(e["action"] == "segment_map" for e in snap["device_traces"][1]) == 1
    tagged = [e for e in snap["device_traces"][0] if e["tag"] == "weights"]
    assert len(tagged) == 4 + 1 * 2  # four allocations, one of them freed
    assert tagged[0]["frames"] == [{"filename": "weights", "line": 0,
                                    "name": "gpumem_set_tag"}]
    for d in snap["devices"]:
        assert d["history_recording"] and d["history_dropped"] == 0
        assert d["history_events"] == len(snap["device_traces"][d["device"]])
    # the pickle: the same dict, in the opcodes the viewer's unpickler reads
    with open(path, "rb") as f:
        raw = f.read()
    assert pickle.loads(raw) == snap
    used = {op.name for op, _, _ in pickletools.genops(raw)}
    assert used <= VIEWER_OPCODES, used - VIEWER_OPCODES


@pytest.mark.parametrize("vmm", ["true", "false"])
def test_the_history_on_the_driver_double(tmp_path, vmm):
    env = {"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": driver_double(),
           "FAKECUDA_DEVICES": "Fake GPU:4GiB:8.0,Fake GPU:4GiB:8.0",
           "GPUMEM_RECORD_HISTORY": "100000", "GPUMEM_CUDA_VMM": vmm}
    got, path = run_scenario(tmp_path, env=env)
    snap = got["snap"]
    check_snapshot(snap)
    check_traces(snap, from_start=True)
    grown = {e["action"] for e in snap["device_traces"][0]
             if e["action"].startswith("segment")}
    # mapped side by side into the range: segment_map; plain cuMemAlloc regions,
    # each its own segment: segment_alloc
    assert grown == ({"segment_map"} if vmm == "true" else {"segment_alloc"})


def test_a_ring_that_wrapped_still_follows_the_viewers_rules():
    out = run("""
        import json, random, sys, gpumem
        sys.path.insert(0, %r)
        from test_snapshot import check_snapshot, check_traces
        gpus = gpumem.config.list_physical_devices('GPU')
        gpumem.config.experimental.set_memory_growth(gpus[0], True)
        gpumem.record_history(50)
        rng = random.Random(3)
        held = []
        for i in range(2000):
            if held and rng.random() < 0.5:
                held.pop(rng.randrange(len(held))).free()
            else:
                held.append(gpumem.malloc(rng.randint(1, 3 << 20), 0))
            if i %% 500 == 0:
                gpumem.config.experimental.get_memory_info('GPU:0')
        gpumem.release_unused()
        snap = gpumem.snapshot()
        check_snapshot(snap)
        check_traces(snap)
        print(json.dumps(snap['devices'][0]))
        """ % os.path.dirname(os.path.abspath(__file__)))
    dev = json.loads(out)
    assert dev["history_events"] == 50 and dev["history_dropped"] > 1000


def test_a_snapshot_with_history_while_eight_threads_allocate_is_consistent():
    # The threads make about a million calls a second: the ring wraps, and each
    # snapshot is checked by the viewer's walk back from its chunks, which fails
    # unless the events and the chunks were copied at the same moment.
    out = run("""
        import sys, random, threading, time, gpumem
        sys.path.insert(0, %r)
        from test_snapshot import check_snapshot, check_traces
        gpus = gpumem.config.list_physical_devices('GPU')
        gpumem.config.experimental.set_memory_growth(gpus[0], True)
        gpumem.record_history(20000)
        stop = threading.Event()
        def churn(i):
            rng = random.Random(i)
            held = []
            with gpumem.tag('thread-%%d' %% i):
                while not stop.is_set():
                    if held and rng.random() < 0.5:
                        held.pop(rng.randrange(len(held))).free()
                    else:
                        held.append(gpumem.malloc(rng.randint(1, 1 << 18), 0))
        threads = [threading.Thread(target=churn, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        # until five snapshots have seen the threads' events (at most 10 s: on a
        # loaded machine the threads may start late)
        seen, deadline = [], time.monotonic() + 10
        while len(seen) < 5 and time.monotonic() < deadline:
            snap = gpumem.snapshot(0)
            check_snapshot(snap)
            n = check_traces(snap)
            tags = {e['tag'] for e in snap['device_traces'][0] if e['action'] == 'alloc'}
            assert all(t.startswith('thread-') for t in tags), tags
            if n > 0:
                seen.append((n, snap['devices'][0]['num_allocs']))
        stop.set()
        for t in threads:
            t.join()
        final = gpumem.snapshot(0)['devices'][0]['num_allocs']
        print('while running', sum(allocs < final for n, allocs in seen))
        """ % os.path.dirname(os.path.abspath(__file__)))
    assert int(out.split()[-1]) >= 1, out  # taken while the threads ran


def _replay_program():
    lib = os.environ.get("GPUMEM_LIBRARY") or os.path.join(PYTHON_DIR, "..", "build",
                                                          "lib", "libgpumem.so")
    path = os.path.join(os.path.dirname(os.path.dirname(lib)), "bench", "gpumem-replay")
    if not os.path.exists(path):
        pytest.skip("no gpumem-replay at %s (build with -Dbench=true)" % path)
    return path


def test_the_historys_trace_replays_to_the_same_peak(tmp_path):
    replay = _replay_program()
    trace = str(tmp_path / "run.trace")
    out = run("""
        import importlib, json, random, gpumem
        gpus = gpumem.config.list_physical_devices('GPU')
        gpumem.config.experimental.set_memory_growth(gpus[0], True)
        gpumem.record_history(100000)
        rng = random.Random(7)
        held, live, peak = [], 0, 0
        for i in range(3000):
            if held and rng.random() < 0.48:
                b = held.pop(rng.randrange(len(held)))
                live -= (b.nbytes + 255) // 256 * 256
                b.free()
            else:
                size = rng.choice([rng.randint(1, 4096), rng.randint(1, 8 << 20)])
                held.append(gpumem.malloc(size, 0))
                live += (size + 255) // 256 * 256
                peak = max(peak, live)
        gpumem.dump_trace(%r)
        info = gpumem.config.experimental.get_memory_info('GPU:0')
        text = importlib.import_module('gpumem.snapshot').history_trace()
        print(json.dumps({'peak': peak, 'gpumem_peak': info['peak'], 'text': text}))
        """ % trace, gpus="24GiB")
    got = json.loads(out)
    with open(trace) as f:
        text = f.read()
    assert text == got["text"]
    lines = [l for l in text.splitlines() if not l.startswith("#")]
    assert len(lines) == 3000  # one line per malloc and per free, no more
    assert sum(l.startswith("f ") for l in lines) > 1000
    assert got["peak"] == got["gpumem_peak"]  # sizes rounded to 256 bytes as gpumem does
    proc = subprocess.run([replay, "--allocator", "api", "--repeat", "0", "--json", trace],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["peak_live_bytes"] == got["peak"]
    assert result["failures"] == 0 and result["ops"] == len(lines)


def test_record_history_and_dump_trace_refuse_bad_arguments(tmp_path):
    out = run("""
        import gpumem
        from gpumem import errors
        for bad, kind in ((-1, ValueError), (1.5, TypeError), (True, TypeError),
                          (1 << 40, errors.InvalidArgumentError)):
            try:
                gpumem.record_history(bad)
            except kind as e:
                print(kind.__name__, e)
            else:
                raise AssertionError('%%r was accepted' %% (bad,))
        gpumem.record_history(0)
        try:
            gpumem.dump_trace(%r)
        except errors.InvalidArgumentError as e:
            print('unwritable:', e)
        """ % str(tmp_path / "no" / "such" / "dir.trace"))
    assert "gpumem_record_history(1099511627776): at most 268435456" in out, out
    assert "unwritable: gpumem_history_trace_file(/device:GPU:-1): cannot write" in out


def test_a_snapshot_is_utf8_whatever_bytes_the_tags_hold(tmp_path):
    """Issue 33, item 4: tags were copied raw into the JSON, so after
    gpumem_set_tag(b"\\xff\\xfe") json.load failed. Each byte outside well-formed
    UTF-8 is now U+FFFD; well-formed text, quotes and control characters keep
    their meaning."""
    path = str(tmp_path / "snap.json")
    run("""
        import ctypes, gpumem
        from gpumem import _lib
        keep = []
        for tag in (b"\\xff\\xfe", b"bad\\xff", b"caf\\xc3\\xa9 \\"q\\" \\x1b[2J",
                    b"\\xed\\xa0\\x80", b"\\xc3"):
            assert _lib.lib.gpumem_set_tag(tag) == 0
            keep.append(gpumem.malloc(1 << 20, 0))
        _lib.lib.gpumem_set_tag(None)
        assert _lib.lib.gpumem_snapshot_file(None, -1, %r.encode()) == 0
        n = ctypes.c_size_t(0)
        _lib.lib.gpumem_snapshot_json(None, -1, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 4096)
        assert _lib.lib.gpumem_snapshot_json(None, -1, buf, len(buf),
                                             ctypes.byref(n)) == 0
        import json
        json.loads(buf.value.decode("utf-8"))  # strict: no bad byte, valid JSON
        """ % path, env={"GPUMEM_RECORD_HISTORY": "100"})
    with open(path, encoding="utf-8", errors="strict") as f:
        snap = json.load(f)
    check_snapshot(snap)
    tags = [b["tag"] for s in snap["segments"] for b in s["blocks"]
            if b["state"] == "active_allocated"]
    assert tags == ["\ufffd\ufffd", "bad\ufffd", 'caf\u00e9 "q" \x1b[2J',
                    "\ufffd\ufffd\ufffd", "\ufffd"], tags
    # the history's copies of the tags too (device_traces), and the frames
    events = [e for t in snap["device_traces"] for e in t if e["action"] == "alloc"]
    assert [e["tag"] for e in events] == tags
    assert [e["frames"][0]["filename"] for e in events] == tags


def test_files_are_written_whole_and_never_through_a_link(tmp_path):
    """Issue 33, item 3, for the files the package writes: dump_snapshot and the
    map tool refuse a symbolic link at the path (its target untouched) and
    replace a file by renaming a new one onto it (a hard link to the old file
    keeps the old bytes), leaving nothing else behind."""
    target = tmp_path / "target"
    target.write_text("precious")
    link = tmp_path / "snap.pickle"
    link.symlink_to(target)
    real = tmp_path / "real.json"
    real.write_text("old")
    os.link(real, tmp_path / "old.json")
    out = run("""
        import gpumem
        keep = gpumem.malloc(1 << 20, 0)
        for path in (%r, %r):
            try:
                gpumem.dump_snapshot(path)
            except OSError as e:
                print("refused:", e)
        gpumem.dump_snapshot(%r)
        """ % (str(link), str(tmp_path / "snap.json"), str(real)))
    assert out.count("refused:") == 1 and "symbolic link" in out, out
    assert target.read_text() == "precious"
    assert (tmp_path / "old.json").read_text() == "old"
    json.loads(real.read_text())
    json.loads((tmp_path / "snap.json").read_text())
    for output in ("map.svg", "map.html", "map.pickle"):
        dest = tmp_path / ("l-" + output)
        dest.symlink_to(target)
        proc = subprocess.run([sys.executable, "-m", "gpumem.map", str(real),
                               "-o", str(dest)], env=scenario_env(), cwd=str(tmp_path),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and "symbolic link" in proc.stderr, proc.stderr
        assert target.read_text() == "precious"
        proc = subprocess.run([sys.executable, "-m", "gpumem.map", str(real),
                               "-o", str(tmp_path / output)], env=scenario_env(),
                              cwd=str(tmp_path), capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["target", "snap.pickle", "real.json", "old.json", "snap.json", "map.svg",
         "map.html", "map.pickle", "l-map.svg", "l-map.html", "l-map.pickle"])
