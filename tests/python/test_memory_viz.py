"""A gpumem snapshot with an event history opened in PyTorch's own memory
viewer (issue 24): torch/utils/viz/MemoryViz.js, what pytorch.org/memory_viz
and the page of ``python -m torch.cuda._memory_viz trace_plot`` load, run in
headless Chromium on a local page that hands it the pickle as trace_plot's page
does (``add_local_files``). Each of its views must draw without a JavaScript
error, and draw what the snapshot holds: the Active Memory Timeline a polygon
per allocation in the history, the Allocator State History an entry per event
and, at the last one, the snapshot's segments and blocks and its allocated and
reserved bytes; on the CUDA driver double, blocks freed on a stream whose work
is held drawn as that stream's free memory (inactive, as PyTorch draws a
stream's cached blocks), none waiting. A page handed a pickle the
viewer refuses (protocol 5) must report the viewer's error, so that a rejection
cannot pass unseen. A screenshot of each view is taken.

MemoryViz.js is PyTorch's and is not in this tree: the test takes it from
GPUMEM_MEMORYVIZ_JS, else from beside an installed torch, and is skipped without
it. The viewer imports d3 version 5 from a CDN; the page maps those imports (an
import map) to a module made here around Debian's d3 5 (package node-d3;
GPUMEM_D3_JS names another copy of its dist/d3.js), served with the viewer by a
local http.server on 127.0.0.1, so nothing leaves the machine.
GPUMEM_VIEWER_SCREENSHOTS=DIR copies two of the screenshots into DIR: the
timeline of the run on simulated GPUs (viewer.png) and the state history of the
run on the driver double (viewer-state.png).

The browser tests have not run since stream-ordered frees became their stream's
free memory at once (issue 31): this machine and CI have no headless browser.
"""

import base64
import functools
import http.server
import importlib.util
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import driver_double, run, scenario_env

CHROMIUM = "/usr/bin/chromium"
DEBIAN_D3 = "/usr/share/nodejs/d3/dist/d3.js"
VIEWS = {"timeline": "Active Memory Timeline", "state": "Allocator State History"}


def _memory_viz_js():
    """MemoryViz.js: GPUMEM_MEMORYVIZ_JS, or the one an installed torch ships."""
    path = os.environ.get("GPUMEM_MEMORYVIZ_JS")
    if path:
        return path if os.path.isfile(path) else None
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    for base in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(base, "utils", "viz", "MemoryViz.js")
        if os.path.isfile(path):
            return path
    return None


def _d3_js():
    path = os.environ.get("GPUMEM_D3_JS", DEBIAN_D3)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        head = f.read(200)
    return path if re.search(r"d3js\.org v5\.", head) else None


MEMORY_VIZ_JS = _memory_viz_js()
D3_JS = _d3_js()
pytestmark = [
    pytest.mark.skipif(not os.path.exists(CHROMIUM),
                       reason="no headless browser: %s is missing (apt-get install "
                              "chromium)" % CHROMIUM),
    pytest.mark.skipif(MEMORY_VIZ_JS is None,
                       reason="no PyTorch MemoryViz.js: set GPUMEM_MEMORYVIZ_JS to one "
                              "(torch/utils/viz/MemoryViz.js) or install torch"),
    pytest.mark.skipif(D3_JS is None,
                       reason="no d3 version 5 for the viewer's imports: %s is missing "
                              "(apt-get install node-d3) and GPUMEM_D3_JS is unset"
                              % DEBIAN_D3),
]

# A training loop on one growing simulated GPU, every event recorded: weights,
# then four steps whose activations and gradients come and go, and a fifth
# step under way at the snapshot.
SCENARIO = """
    import gpumem
    gpu = gpumem.config.list_physical_devices('GPU')[0]
    gpumem.config.experimental.set_memory_growth(gpu, True)
    gpumem.record_history(100000)
    MiB = 1 << 20
    with gpumem.tag('weights'):
        weights = [gpumem.malloc((8 + 4 * i) * MiB, 0) for i in range(6)]
    def step(n_acts):
        with gpumem.tag('activations'):
            acts = [gpumem.malloc((6 + (i * 7) % 11) * MiB - 1000, 0)
                    for i in range(n_acts)]
        with gpumem.tag('gradients'):
            grads = [gpumem.malloc((8 + 4 * i) * MiB, 0) for i in range(6)]
        return acts, grads
    for _ in range(4):
        acts, grads = step(12)
        for a in reversed(acts):
            a.free()
        for g in grads:
            g.free()
    acts, grads = step(5)
"""
DUMP = """
    gpumem.dump_snapshot(OUT)
"""
# On the CUDA driver double: three blocks allocated on a stream whose work is
# then held (a kernel still running), two of them freed on it: they are the
# stream's free memory (inactive, naming the stream), nothing waits. This
# snapshot goes through JSON (as gpumem_snapshot_file and GPUMEM_OOM_SNAPSHOT
# write it) and gpumem.map's pickle.
PENDING = """
    import ctypes, os
    from gpumem import hooks
    double = ctypes.CDLL(os.environ['GPUMEM_CUDA_LIBRARY'])
    double.fakecuda_hold_stream.argtypes = [ctypes.c_void_p]
    stream = ctypes.c_void_p(0x5151)
    malloc_async, free_async = hooks._stream_api()
    ptrs = []
    with gpumem.tag('on a stream'):
        for i in range(3):
            out = ctypes.c_void_p()
            malloc_async(0, (10 + 2 * i) * MiB, stream, out)
            ptrs.append(out.value)
    double.fakecuda_hold_stream(stream)
    for p in ptrs[:2]:
        free_async(p, stream)
"""

# Reports what the page saw: the errors (uncaught, rejected, console.error)
# and what the viewer drew, as JSON in a script element that --dump-dom prints
# unescaped.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>gpumem snapshot in MemoryViz.js</title>
<script type="importmap">%(importmap)s</script>
<script>
window.gpumemErrors = [];
addEventListener('error', e => gpumemErrors.push(
    'uncaught: ' + e.message + ' at ' + e.filename + ':' + e.lineno));
addEventListener('unhandledrejection', e => gpumemErrors.push(
    'unhandled rejection: ' + e.reason));
const consoleError = console.error.bind(console);
console.error = (...args) => {
  gpumemErrors.push('console.error: ' + args.join(' '));
  consoleError(...args);
};
</script>
</head><body>
<script type="module">
import {add_local_files} from "./MemoryViz.js";
function report() {
  const svgs = [...document.querySelectorAll('svg')].map(s => ({
    polygons: s.querySelectorAll('polygon').length,
    rects: s.querySelectorAll('rect').length}));
  const events = document.querySelectorAll(
    'div[style*="font-family: monospace"] > pre').length;
  const stack = [...document.querySelectorAll('pre')].map(p => p.textContent)
    .filter(t => t.includes(' reserved)'));
  // MemoryView.draw's blocks (its second group) drawn red: freed, still waiting
  const waiting = document.querySelectorAll(
    'svg > g > g:nth-child(2) > rect[fill="red"]').length;
  const out = document.createElement('script');
  out.type = 'application/json';
  out.id = 'gpumem-status';
  out.textContent = JSON.stringify({errors: gpumemErrors, svgs, events, stack, waiting});
  document.body.appendChild(out);
}
// the report is set up first: it comes also when the viewer throws
requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(report, 200)));
const view = new URLSearchParams(location.search).get('view');
add_local_files([{name: 'gpumem.pickle', base64: '%(base64)s'}], view);
</script>
</body></html>
"""


def _d3_module(d3_path):
    """An ES module of Debian's d3 5 bundle (UMD) that exports its names as the
    CDN's modules do; `event` is a live binding, as the viewer reads d3.event."""
    with open(d3_path, encoding="utf-8") as f:
        src = f.read()
    names = sorted(set(re.findall(r"^\s*exports\.(\w+)\s*=", src, re.M))
                   - {"event", "__esModule"})
    assert "select" in names and "scaleLinear" in names and "brushX" in names
    # the module's own names are prefixed: d3's code must not see them in place
    # of the page's globals (window, event)
    return "\n".join(
        ["// made by tests/python/test_memory_viz.py around %s" % d3_path,
         "const gpumem_d3 = {};",
         "let gpumem_d3_event = null;",
         "Object.defineProperty(gpumem_d3, 'event', {",
         "  get() { return gpumem_d3_event; },",
         "  set(v) { gpumem_d3_event = v; }, enumerable: true});",
         "(function (exports, module) {", src, "}).call(globalThis, gpumem_d3, {});",
         "export {gpumem_d3_event as event};"]
        + ["const gpumem_d3_%s = gpumem_d3.%s; export {gpumem_d3_%s as %s};" % (n, n, n, n)
           for n in names]
        + ["export default gpumem_d3;", ""])


def _make_site(site, pickle_path):
    os.makedirs(site)
    shutil.copy(MEMORY_VIZ_JS, os.path.join(site, "MemoryViz.js"))
    with open(MEMORY_VIZ_JS, encoding="utf-8") as f:
        viz = f.read()
    cdn = sorted(set(re.findall(r"""^\s*import\b[^;]*?\bfrom\s*["']([^"']+)["']""",
                                viz, re.M)))
    assert cdn and all("d3" in u for u in cdn), cdn  # the viewer imports only d3
    with open(os.path.join(site, "d3.js"), "w", encoding="utf-8") as f:
        f.write(_d3_module(D3_JS))
    with open(pickle_path, "rb") as f:
        b64 = base64.b64encode(f.read()).decode("ascii")
    with open(os.path.join(site, "index.html"), "w", encoding="utf-8") as f:
        f.write(PAGE % {"importmap": json.dumps({"imports": {u: "./d3.js" for u in cdn}}),
                        "base64": b64})


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _chromium(profile, args, timeout=120):
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
             "--hide-scrollbars", "--no-proxy-server", "--disable-background-networking",
             "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
             "--user-data-dir=" + profile]
    return subprocess.run(flags + args, capture_output=True, text=True, timeout=timeout)


def _status(dom, stderr):
    m = re.search(r'<script type="application/json" id="gpumem-status">(.*?)</script>',
                  dom, re.S)
    assert m, "the viewer's page did not finish (no status)\n--- stderr\n%s" % stderr[-4000:]
    return json.loads(m.group(1))  # a script's text is serialized as it is


def _expected(snap):
    """What the viewer must draw of device 0: its allocations in the history,
    its event list (a free_requested directly followed by its free_completed is
    one 'free' entry, as annotate_snapshot elides it), the segments and active
    blocks at the last event, and the allocated and reserved bytes there."""
    trace = snap["device_traces"][0]
    allocs = sum(e["action"] == "alloc" for e in trace)
    events, prev = 0, None
    for e in trace:
        if not (e["action"] == "free_completed" and prev is not None
                and prev["action"] == "free_requested" and prev["addr"] == e["addr"]):
            events += 1
        prev = e
    segs = [s for s in snap["segments"] if s["device"] == 0]
    active = [b for s in segs for b in s["blocks"] if b["state"] != "inactive"]
    return {"allocs": allocs, "events": events, "segments": len(segs),
            "blocks": len(active),
            "pending": sum(b["state"] == "active_pending_free" for b in active),
            "allocated": sum(b["requested_size"] for b in active),
            "reserved": sum(s["total_size"] for s in segs)}


class _Viewer:
    """The page, MemoryViz.js and d3 served from `site` on 127.0.0.1."""

    def __init__(self, tmp_path, pickle_path):
        self.tmp = tmp_path
        site = str(tmp_path / "site")
        _make_site(site, pickle_path)
        self.server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(_Quiet, directory=site))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def open(self, key, screenshot=False):
        """What view VIEWS[key] drew (_status), and its screenshot's path."""
        page = "http://127.0.0.1:%d/index.html?view=%s" % (
            self.server.server_address[1], VIEWS[key].replace(" ", "%20"))
        profile = str(self.tmp / ("profile-" + key))
        dom = _chromium(profile, ["--dump-dom", page])
        assert dom.returncode == 0, dom.stderr[-4000:]
        got = _status(dom.stdout, dom.stderr)
        # console errors as Chromium logs them, beside those the page caught
        got["logged"] = [line for line in dom.stderr.splitlines()
                         if ":CONSOLE" in line and "Uncaught" in line]
        png = None
        if screenshot:
            png = str(self.tmp / ("viewer-%s.png" % key))
            shot = _chromium(profile, ["--window-size=1400,720", "--screenshot=" + png,
                                       page])
            assert shot.returncode == 0 and os.path.getsize(png) > 10000, \
                shot.stderr[-4000:]
        return got, png

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _scenario_pickle(tmp_path, tail="", env=None, via_json=False):
    """The pickle of the scenario's snapshot: dump_snapshot's, or via_json the
    JSON (gpumem_snapshot_file's text) written as a pickle by gpumem.map."""
    path = str(tmp_path / "gpumem.pickle")
    dumped = str(tmp_path / "gpumem.json") if via_json else path
    script = SCENARIO + tail + DUMP
    run("OUT = %r\n" % dumped + script.replace("\n    ", "\n"), gpus="12GiB", env=env)
    if via_json:
        subprocess.run([sys.executable, "-m", "gpumem.map", dumped, "-o", path],
                       env=scenario_env(), check=True, timeout=60)
    return path


def test_a_snapshot_with_history_opens_in_pytorchs_viewer(tmp_path):
    pickle_path = _scenario_pickle(tmp_path)
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    want = _expected(snap)
    assert want["allocs"] == 6 + 4 * 18 + 11 and want["blocks"] == 6 + 11
    viewer = _Viewer(tmp_path, pickle_path)
    try:
        _check_views(viewer, want)
    finally:
        viewer.close()
    _keep(tmp_path / "viewer-timeline.png", "viewer.png")


def _keep(png, name):
    """Copies a screenshot to GPUMEM_VIEWER_SCREENSHOTS/name (docs/images/)."""
    out = os.environ.get("GPUMEM_VIEWER_SCREENSHOTS")
    if out:
        shutil.copy(str(png), os.path.join(out, name))


def _check_views(viewer, want):
    """Both views of `viewer` drew `want` (_expected) with no error."""
    got, _ = viewer.open("timeline", screenshot=True)
    assert got["errors"] == [] and got["logged"] == [], got
    # process_alloc_data: a polygon per allocation and one for the
    # summarized ones in the plot; the minimap's one
    assert [s["polygons"] for s in got["svgs"]] == [want["allocs"] + 1, 1], got

    got, _ = viewer.open("state", screenshot=True)
    assert got["errors"] == [] and got["logged"] == [], got
    assert got["events"] == want["events"], (got, want)
    # MemoryView.draw at the last event: a rect per segment, two per active
    # block (its requested bytes and its rounding)
    rects = max(s["rects"] for s in got["svgs"])
    assert rects == want["segments"] + 2 * want["blocks"], (got, want)
    assert len(got["stack"]) == 1, got
    assert "(%d bytes) allocated" % want["allocated"] in got["stack"][0], got
    assert "(%d bytes) reserved" % want["reserved"] in got["stack"][0], got
    assert got["waiting"] == want["pending"], (got, want)


def test_a_streams_frees_in_pytorchs_viewer_on_the_driver_double(tmp_path):
    env = {"GPUMEM_BACKEND": "cuda", "GPUMEM_CUDA_LIBRARY": driver_double(),
           "FAKECUDA_DEVICES": "Fake GPU:16GiB:8.0"}
    pickle_path = _scenario_pickle(tmp_path, PENDING, env, via_json=True)
    with open(pickle_path, "rb") as f:
        snap = pickle.load(f)
    want = _expected(snap)
    assert want["pending"] == 0 and want["blocks"] == 6 + 11 + 1, want
    held = [b for s in snap["segments"] for b in s["blocks"]
            if b["state"] == "inactive" and b["stream"] == 0x5151]
    assert held, snap["segments"]
    viewer = _Viewer(tmp_path, pickle_path)
    try:
        _check_views(viewer, want)
    finally:
        viewer.close()
    _keep(tmp_path / "viewer-state.png", "viewer-state.png")


def test_the_page_reports_what_the_viewer_rejects(tmp_path):
    # the same snapshot in pickle protocol 5, which the viewer's unpickler
    # refuses ("Unhandled version 5"): the page must say so
    with open(_scenario_pickle(tmp_path), "rb") as f:
        snap = pickle.load(f)
    path = str(tmp_path / "protocol5.pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=5)
    viewer = _Viewer(tmp_path, path)
    try:
        got, _ = viewer.open("timeline")
    finally:
        viewer.close()
    assert any("Unhandled version 5" in e for e in got["errors"]), got
    assert any("Unhandled version 5" in e for e in got["logged"]), got
    assert [s["polygons"] for s in got["svgs"]] == [], got
