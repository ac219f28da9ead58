#!/usr/bin/env python3
"""Tests of bench/run_cuda.sh's parts that need no GPU (suite bench-smoke): the
table bench/cuda_table.py makes from canned JSON lines (one denominator, the raw
requested peak, for every row; gpumem's driver calls per 1,000 operations and
the driver's price per call, measured and listed), its refusals, that run_cuda.sh
skips with exit
status 77 and measures nothing where no GPU is listed, and, given
GPUMEM_TEST_REPLAY and GPUMEM_TEST_FAKECUDA (meson sets them), the whole script on
the driver double with stand-ins for nvidia-smi, nvcc and torch. Standard library
only: python3 bench/test_cuda_table.py."""

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cuda_table  # noqa: E402
import torch_replay  # noqa: E402  (imports torch only in main())

# a (raw bytes) 1000 + 300 live, then 1000 freed and 2000 allocated: peak 2300
TRACE = "# canned\na x 1000\na y 300\nf x\na z 2000\nf y\nf z\n"


def row(allocator, ns, reserved, **extra):
    r = {"trace": "canned", "allocator": allocator, "ops": 6, "ns_per_op": ns,
         "peak_live_bytes": 2560, "peak_reserved_bytes": reserved, "failures": 0}
    r.update(extra)
    return r


# gpumem-replay's driver figures: 12 operations counted (two timed replays), 4
# calls; a push of 400 ns listed at 300, a map of 2 MiB at 9000 ns listed at 2000
CALLS = {"cuCtxPushCurrent_v2": {"calls": 2, "ns": 800, "bytes": 0, "price_ns": 600},
         "cuCtxPopCurrent_v2": {"calls": 0, "ns": 0, "bytes": 0, "price_ns": 0},
         "cuMemMap": {"calls": 2, "ns": 18000, "bytes": 4 << 20, "price_ns": 4000}}
ROWS = [
    row("torch", 9.0, 4600, device="Test GPU"),
    row("cudaMalloc", 2000.0, 4 << 20, device="Test GPU"),
    row("gpumem-growth", 50.5, 2300, driver_calls_per_1000_ops=333.333, driver_ops=12,
        driver_calls=CALLS),
    row("cudaMallocAsync", 400.25, 2 << 20, device="Test GPU", failures=1),
]


class Table(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(self.dir.name, "canned.trace"), "w") as f:
            f.write(TRACE)
        self.results = os.path.join(self.dir.name, "results.jsonl")
        with open(self.results, "w") as f:
            f.write("\n".join(json.dumps(r) for r in ROWS) + "\n\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            rc = cuda_table.main(list(args))
        return rc, out.getvalue(), err.getvalue()

    def test_raw_peak(self):
        self.assertEqual(cuda_table.raw_peak_live(os.path.join(self.dir.name,
                                                               "canned.trace")), 2300)

    def test_rows_ratios_and_order(self):
        rc, out, err = self.run_main("--traces", self.dir.name, self.results)
        self.assertEqual(rc, 0, err)
        lines = out.splitlines()
        body = [ln for ln in lines if ln.startswith("| canned")]
        self.assertEqual(body, [
            "| canned | gpumem-growth | 50.5 | 1.000 | 0 | 333.3 |",
            "| canned | cudaMalloc | 2000.0 | 1823.610 | 0 | - |",
            "| canned | cudaMallocAsync | 400.2 | 911.805 | 1 | - |",
            "| canned | torch | 9.0 | 2.000 | 0 | - |",
            # the driver's price: measured ns per call, the entry points called
            "| canned | gpumem-growth | 400 | 9000 |",
        ])
        self.assertIn("| trace | allocator | cuCtxPushCurrent_v2 | cuMemMap |", lines)
        self.assertIn("| price list | | 300 | 2000 |", lines)
        self.assertIn("Device: Test GPU.", lines)
        self.assertTrue(any("canned 0.000 GiB" in ln for ln in lines))

    def test_no_driver_figures_no_price_table(self):
        out = cuda_table.table([ROWS[0], ROWS[1]], {"canned": 2300})
        self.assertFalse(any("price" in ln for ln in out))

    def test_the_denominator_is_raw_not_each_rows_peak(self):
        rows = [row("gpumem-growth", 1.0, 2300, peak_live_bytes=2560),
                row("torch", 1.0, 2300, peak_live_bytes=2300)]
        out = cuda_table.table(rows, {"canned": 2300})
        self.assertEqual(sum(" 1.000 |" in ln for ln in out), 2)

    def test_refusals(self):
        with open(self.results, "a") as f:
            f.write("not json\n")
        rc, out, err = self.run_main("--traces", self.dir.name, self.results)
        self.assertEqual(rc, 1)
        self.assertIn("not JSON", err)
        with open(self.results, "w") as f:
            f.write(json.dumps(dict(ROWS[0], trace="missing")) + "\n")
        rc, out, err = self.run_main("--traces", self.dir.name, self.results)
        self.assertEqual(rc, 1)
        self.assertIn("no trace file for 'missing'", err)


class TorchTraceParse(unittest.TestCase):
    def test_parse_interns_ids_and_takes_the_raw_peak(self):
        with tempfile.NamedTemporaryFile("w", suffix=".trace") as f:
            f.write(TRACE)
            f.flush()
            kinds, ids, sizes, nids, peak = torch_replay.parse(f.name)
        self.assertEqual(kinds, [1, 1, 0, 1, 0, 0])
        self.assertEqual(ids, [0, 1, 0, 2, 1, 2])
        self.assertEqual(sizes, [1000, 300, 0, 2000, 0, 0])
        self.assertEqual((nids, peak), (3, 2300))


class Skip(unittest.TestCase):
    def test_run_cuda_skips_without_a_gpu(self):
        with tempfile.TemporaryDirectory() as d:
            # a PATH whose nvidia-smi lists no GPU; the build folder is never made
            smi = os.path.join(d, "nvidia-smi")
            with open(smi, "w") as f:
                f.write("#!/bin/sh\necho 'No devices found'\nexit 6\n")
            os.chmod(smi, 0o755)
            env = dict(os.environ, PATH=d + os.pathsep + "/usr/bin:/bin")
            build = os.path.join(d, "build")
            p = subprocess.run(["sh", os.path.join(HERE, "run_cuda.sh"), build],
                               env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 77, p.stderr)
            self.assertIn("no CUDA GPU", p.stderr)
            self.assertIn("skipped", p.stderr)
            self.assertFalse(os.path.exists(build))


FAKE_SMI = "#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-fa4ec0da-0000-4000-8000-000000000000)'\n"

# nvcc's stand-in: writes, as the -o file, a gpumem-cuda-baselines that prints one
# canned row (--allocator A --repeat N TRACE), 4 GiB reserved
FAKE_NVCC = r"""#!/bin/sh
out=
while [ $# -gt 0 ]; do
    [ "$1" = -o ] && { out=$2; shift; }
    shift
done
cat > "$out" <<'EOF'
#!/bin/sh
printf '{"trace": "%s", "allocator": "%s", "ops": 1, "ns_per_op": 1000.0, "peak_live_bytes": 1, "peak_reserved_bytes": 4294967296, "failures": 0, "device": "Fake GPU"}\n' "$(basename "$5" .trace)" "$2"
EOF
chmod +x "$out"
"""

# a python3 without torch, whatever this machine has
NO_TORCH = """#!/bin/sh
[ "$1" = -c ] && [ "$2" = "import torch" ] && exit 1
exec "%s" "$@"
""" % sys.executable


class StandIn(unittest.TestCase):
    """run_cuda.sh whole, on the driver double (tests/fakecuda, as libcuda.so.1)
    for gpumem's rows and stand-ins for nvidia-smi, nvcc's baselines and a
    python3 without torch: the rows and labels it writes, the table, and the
    trim's bound on the CUDA backend (never above GPUMEM_GROWTH_TRIM=off)."""

    def test_run_cuda_on_the_driver_double(self):
        replay = os.environ.get("GPUMEM_TEST_REPLAY")
        fake = os.environ.get("GPUMEM_TEST_FAKECUDA")
        if not replay or not fake:
            self.skipTest("no GPUMEM_TEST_REPLAY and GPUMEM_TEST_FAKECUDA (meson test "
                          "sets them)")
        with tempfile.TemporaryDirectory() as d:
            for name, text in (("nvidia-smi", FAKE_SMI), ("nvcc", FAKE_NVCC),
                               ("python3", NO_TORCH)):
                with open(os.path.join(d, name), "w") as f:
                    f.write(text)
                os.chmod(os.path.join(d, name), 0o755)
            path = d + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
            env = dict(os.environ, PATH=path, NVCC=os.path.join(d, "nvcc"),
                       PYTHON=os.path.join(d, "python3"), REPLAY=replay, REPEAT="1",
                       TRACE_OPS="0.02", WORKLOADS="training random",
                       LD_LIBRARY_PATH=os.path.dirname(fake),
                       FAKECUDA_DEVICES="Fake GPU:64GiB:9.0")
            env.pop("GPUMEM_BENCH_GROWTH_TRIM", None)
            build = os.path.join(d, "build")
            # the replay ignores the environment, so it opens the double's GPU's
            # ledger where every gpumem process would: left as found
            ledger = "/dev/shm/gpumem-GPU-fa4ec0da-0000-4000-8000-000000000000.ledger"
            was_there = os.path.exists(ledger)
            try:
                p = subprocess.run(["sh", os.path.join(HERE, "run_cuda.sh"), build],
                                   env=env, capture_output=True, text=True, timeout=110)
            finally:
                if not was_there and os.path.exists(ledger):
                    os.unlink(ledger)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("PyTorch is not importable", p.stderr)
            with open(os.path.join(build, "cuda-results.jsonl")) as f:
                rows = {(r["trace"], r["allocator"]): r for r in map(json.loads, f)}
            labels = ["gpumem-growth", "gpumem-growth-no-trim", "gpumem-growth-async",
                      "cudaMalloc", "cudaMallocAsync"]
            self.assertEqual(sorted(rows), sorted((t, a) for t in ("training", "random")
                                                  for a in labels))
            body = [ln for ln in p.stdout.splitlines()  # the main table's rows
                    if ln.startswith("| random") and ln.count("|") == 7]
            self.assertEqual([ln.split("|")[2].strip() for ln in body], labels)
            # gpumem's rows have their driver figures, which add up; the price
            # table has a line per gpumem row, each cell its ns per call
            gpumem_rows = [r for r in rows.values() if r["allocator"].startswith("gpumem")]
            for r in gpumem_rows:
                n = sum(c["calls"] for c in r["driver_calls"].values())
                self.assertAlmostEqual(r["driver_calls_per_1000_ops"],
                                       1000.0 * n / r["driver_ops"], delta=0.001)
            kinds = [ln for ln in p.stdout.splitlines()
                     if ln.startswith("| trace | allocator | cu")]
            if any(c["calls"] for r in gpumem_rows for c in r["driver_calls"].values()):
                self.assertEqual(len(kinds), 1, p.stdout)
                header = [k.strip() for k in kinds[0].split("|")[3:-1]]
                for r in gpumem_rows:
                    line = [ln for ln in p.stdout.splitlines() if ln.startswith(
                        "| %s | %s | " % (r["trace"], r["allocator"])) and
                        ln.count("|") == len(header) + 3][0]
                    cells = [c.strip() for c in line.split("|")[3:-1]]
                    for k, cell in zip(header, cells):
                        c = r["driver_calls"][k]
                        self.assertEqual(cell, "%.0f" % (c["ns"] / c["calls"])
                                         if c["calls"] else "-")
                self.assertTrue(any(ln.startswith("| price list |")
                                    for ln in p.stdout.splitlines()))
            for t in ("training", "random"):
                on, off = rows[(t, "gpumem-growth")], rows[(t, "gpumem-growth-no-trim")]
                self.assertEqual(on["failures"], 0)
                self.assertEqual(off["failures"], 0)
                self.assertGreater(on["peak_reserved_bytes"], 0)
                self.assertLessEqual(on["peak_reserved_bytes"], off["peak_reserved_bytes"])


if __name__ == "__main__":
    unittest.main()

