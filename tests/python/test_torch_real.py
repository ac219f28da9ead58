"""gpumem.torch against the real PyTorch package, where this interpreter
imports it (skipped, by name, where it does not), without a GPU: the object
behind CUDAPluggableAllocator(...).allocator() takes every hook gpumem serves
(set_record_stream_fn, set_reset_fn, the three graph-pool ones,
set_memory_fraction_fn), PyTorch lets gpumem's allocator become current, the
library chosen is libgpumem_torch_c10.so where it was built against this
PyTorch, and memory_stats has every key this PyTorch's own documentation lists
(but those gpumem does not count, test_torch.ABSENT: none now, the inactive
split blocks' peaks and totals included). What needs a GPU (the
exception PyTorch raises, record_stream's wait, a graph's replay) is in
test_gpu_torch.py.
"""

import importlib.util
import json
import os

import pytest

from conftest import PYTHON_DIR, run
from test_torch import ABSENT, build_dir, expected_keys

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="PyTorch is not installed for this interpreter (pip install torch)")

ENV = {"PYTHONPATH": PYTHON_DIR}  # the real torch: no stand-ins on the path


def c10_library():
    path = os.path.join(build_dir(), "cpp", "libgpumem_torch_c10.so")
    return path if os.path.exists(path) else None


def test_the_real_allocator_object_takes_every_hook_gpumem_serves():
    out = run("""
    import json, warnings
    import gpumem, gpumem.torch, torch
    assert not torch.__file__.startswith(%r), torch.__file__   # not the stand-in
    probe = torch.cuda.memory.CUDAPluggableAllocator(
        gpumem.library_path, 'gpumem_torch_malloc', 'gpumem_torch_free')
    setters = sorted(n for n in dir(probe.allocator()) if n.startswith('set_'))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        allocator = gpumem.torch.use()
    print(json.dumps({
        'version': torch.__version__, 'setters': setters,
        'hooks_set': gpumem.torch.hooks_set, 'missing': gpumem.torch.missing,
        'library': gpumem.torch.library_path, 'oom_error': gpumem.torch.oom_error,
        'warnings': [str(w.message) for w in caught],
        'wanted': [s for s, _, _, _ in gpumem.torch.HOOKS],
        'current': type(allocator.allocator()).__name__}))
    """ % os.path.dirname(os.path.abspath(__file__)), env=ENV)
    got = json.loads(out.strip().splitlines()[-1])
    wanted = got["wanted"]
    assert len(wanted) == 6
    assert set(wanted) <= set(got["setters"]), (got["version"], got["setters"])
    assert got["hooks_set"] == {s: True for s in wanted}, got
    if c10_library():
        assert got["library"].endswith("libgpumem_torch_c10.so"), got
        assert got["oom_error"] == "torch.cuda.OutOfMemoryError"
        assert got["missing"] == [] and got["warnings"] == [], got
    else:
        assert got["oom_error"] == "RuntimeError"
        assert any("libgpumem_torch_c10.so was not found" in m for m in got["missing"]), got
    print("PyTorch %s: %s" % (got["version"], ", ".join(got["setters"])))


def test_memory_stats_has_every_key_of_this_pytorchs_documentation():
    out = run("""
    import json
    import gpumem, gpumem.torch, torch
    doc = torch.cuda.memory.memory_stats.__doc__          # PyTorch's, before use()
    gpumem.torch.use()
    keep = gpumem.malloc(1 << 20)                         # initializes gpumem
    print(json.dumps({'doc': doc, 'stats': torch.cuda.memory_stats(0),
                      'nested': torch.cuda.memory_stats_as_nested_dict(0)}))
    """, env=ENV)
    got = json.loads(out.strip().splitlines()[-1])
    expected = expected_keys(got["doc"])
    ours = {k for k in got["stats"] if not k.startswith("gpumem.")}
    assert ours == expected, (sorted(ours - expected), sorted(expected - ours))
    assert not ours & set(ABSENT)
    # gpumem.malloc is not PyTorch's: the pool holds it, PyTorch's counts do not
    assert got["stats"]["allocation.all.current"] == 0
    assert got["stats"]["active_bytes.all.current"] == 1 << 20
    assert got["nested"]["reserved_bytes"]["all"]["current"] >= 1 << 20
    # the inactive split blocks, every field PyTorch has (the rest of the
    # region gpumem.malloc's block came from is one)
    s = got["stats"]
    for m in ("inactive_split", "inactive_split_bytes"):
        for p in ("all", "large_pool"):
            cur, peak, allocated, freed = (s["%s.%s.%s" % (m, p, f)] for f in
                                           ("current", "peak", "allocated", "freed"))
            assert cur >= 1 and peak >= cur and allocated - freed == cur, (m, p, s)
