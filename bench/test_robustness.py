#!/usr/bin/env python3
"""Smoke test of the workload families and their report (suite bench-smoke): every
shape of bench/gen_family.py and of bench/gen_indep.py generates a well-formed
trace that frees everything, the same bytes for a seed and other bytes for another
seed; bench/robustness runs the whole family on very short traces (one seed) and
reports a row for every shape, kind and set, for both measures (the robust one at
or above the plain one); its arithmetic on fixed results is right; --baselines
replays only the arena; bad arguments are refused. Never a figure of merit: those
need the full families (docs/bench.md).

    python3 bench/test_robustness.py BUILD/bench/gpumem-replay
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_family  # noqa: E402
import gen_indep  # noqa: E402
from test_gen_traces import parse  # noqa: E402

ROBUSTNESS = os.path.join(HERE, "robustness")
GEN = os.path.join(HERE, "gen_family.py")
GEN_INDEP = os.path.join(HERE, "gen_indep.py")
REPLAY = None  # set from argv
OPS = "0.02"


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Family(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.out = os.path.join(cls.tmp.name, "run")
        cls.results = os.path.join(cls.tmp.name, "results.jsonl")
        cls.report = os.path.join(cls.tmp.name, "report.md")
        cls.proc = subprocess.run(
            [sys.executable, ROBUSTNESS, "--replay", REPLAY, "--traces", cls.out,
             "--seeds", "1", "--ops", OPS, "--jobs", "2", "--results", cls.results,
             "--report", cls.report], capture_output=True, text=True)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_every_kind_has_its_shapes(self):
        kinds = {}
        for name in gen_family.SHAPES:
            kinds.setdefault(name.split("-")[0], []).append(name)
        self.assertEqual(sorted(kinds), sorted(gen_family.KINDS))
        for kind in ("train", "serve", "random", "tiny"):
            self.assertGreaterEqual(len(kinds[kind]), 12, kind)
        for kind in ("conv", "moe", "adv"):
            self.assertGreaterEqual(len(kinds[kind]), 4, kind)

    def test_every_trace_is_well_formed(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        for name in gen_family.SHAPES:
            sizes, peak = parse(os.path.join(self.out, "%s.s1.trace" % name))
            self.assertGreater(len(sizes), 10, name)
            self.assertGreater(peak, 1, name)

    def test_deterministic_per_seed(self):
        d = os.path.join(self.tmp.name, "again")
        for seeds in ("1", "2"):
            r = subprocess.run([sys.executable, GEN, "--out", d, "--seeds", seeds, "--ops",
                                OPS, "--only", "serve-01", "--only", "adv"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        for name in ["serve-01"] + [n for n in gen_family.SHAPES if n.startswith("adv-")]:
            self.assertEqual(read(os.path.join(d, name + ".s1.trace")),
                             read(os.path.join(self.out, name + ".s1.trace")), name)
            self.assertNotEqual(read(os.path.join(d, name + ".s2.trace")),
                                read(os.path.join(d, name + ".s1.trace")), name)

    def test_results_and_report_cover_the_family(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        with open(self.results, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
        want = {(s, a) for s in gen_family.SHAPES
                for a in ("arena", "tlsf", "first-fit", "clairvoyant")}
        self.assertEqual({(r["shape"], r["allocator"]) for r in rows}, want)
        for r in rows:
            self.assertGreaterEqual(r["min_capacity_factor"], 1.0, r)
            # the robust minimum starts its search at the plain one
            self.assertGreaterEqual(r["robust_min_capacity_factor"],
                                    r["min_capacity_factor"], r)
        with open(self.report, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("## Minimum capacity factor", text)
        self.assertIn("## Robust minimum capacity factor", text)
        for part in text.split("## ")[1:]:
            cells = {}
            for line in part.splitlines():
                parts = [p.strip() for p in line.strip("|").split("|")]
                if len(parts) == 7 and parts[1].isdigit():
                    cells[parts[0]] = parts
            for name in list(gen_family.SHAPES) + gen_family.KINDS + ["development",
                                                                        "all"]:
                self.assertIn(name, cells)
                mean, worst = float(cells[name][2]), float(cells[name][3])
                self.assertTrue(0 < mean <= worst, (name, mean, worst))
                # more than 1% above the base is also more than 0.5% above it
                self.assertLessEqual(int(cells[name][5]), int(cells[name][4]), name)
            self.assertEqual(int(cells["all"][1]), len(gen_family.SHAPES))

    def test_baselines_replay_only_the_arena(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        results = os.path.join(self.tmp.name, "again.jsonl")
        r = subprocess.run(
            [sys.executable, ROBUSTNESS, "--replay", REPLAY, "--traces", self.out,
             "--seeds", "1", "--ops", OPS, "--jobs", "2", "--only", "adv",
             "--allocators", "arena", "--baselines", self.results,
             "--results", results], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.results, encoding="utf-8") as f:
            before = {(x["shape"], x["allocator"]): x for x in map(json.loads, f)}
        with open(results, encoding="utf-8") as f:
            after = [json.loads(line) for line in f]
        adv = [n for n in gen_family.SHAPES if n.startswith("adv-")]
        self.assertEqual({(x["shape"], x["allocator"]) for x in after},
                         {(n, a) for n in adv for a in ("arena", "tlsf", "first-fit",
                                                        "clairvoyant")})
        for x in after:  # the baselines as given, the arena replayed alike
            self.assertEqual(x, before[(x["shape"], x["allocator"])])

    def test_report_arithmetic(self):
        rows = []
        for seed, (arena, tlsf, ff) in enumerate([(1.010, 1.000, 1.050),
                                                  (1.000, 1.020, 1.010),
                                                  (1.100, 1.300, 1.000)], 1):
            for a, f in (("arena", arena), ("tlsf", tlsf), ("first-fit", ff)):
                rows.append({"shape": "tiny-01", "seed": seed + 4, "allocator": a,
                             "min_capacity_factor": f})
        src = os.path.join(self.tmp.name, "fixed.jsonl")
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))
        r = subprocess.run([sys.executable, ROBUSTNESS, "--from", src],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        # ratios 1.01, 1/1.01, 1.1: mean 1.0334, worst 1.1000, two above +0.5%
        # (1.01 itself is not above +1%)
        self.assertIn("| tiny-01 | 3 | 1.0334 | 1.1000 | 2 | 1 | – |", r.stdout)
        # results without the robust measure (runs before it) have one section
        self.assertNotIn("Robust", r.stdout)
        self.assertIn("| held out | 3 |", r.stdout)
        # each allocator against the same base: TLSF above on seeds 6 and 7 (1.02 /
        # 1.01, 1.3 / 1.0), first fit on seed 5; no clairvoyant results, none named
        self.assertIn("of 3, by allocator: arena 2, tlsf 2, first-fit 1.", r.stdout)
        # the robust measure: arena 1.02 / 1.00 / 1.10 against bases 1.00 / 1.01 /
        # 1.05 (TLSF's robust figure is worse than first fit's on seed 7 now)
        robust = {5: (1.020, 1.000, 1.060), 6: (1.000, 1.020, 1.010),
                  7: (1.100, 1.300, 1.050)}
        for x in rows:
            x["robust_min_capacity_factor"] = robust[x["seed"]][
                ("arena", "tlsf", "first-fit").index(x["allocator"])]
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(x) + "\n" for x in rows))
        r = subprocess.run([sys.executable, ROBUSTNESS, "--from", src],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        plain, rob = r.stdout.split("## Robust")
        self.assertIn("| tiny-01 | 3 | 1.0334 | 1.1000 | 2 | 1 | – |", plain)
        # ratios 1.02, 1/1.01, 1.1/1.05: mean 1.0192, worst 1.0476, two above +1%
        self.assertIn("| tiny-01 | 3 | 1.0192 | 1.0476 | 2 | 2 | – |", rob)
        self.assertIn("Worst traces (arena / base): tiny-01 seed 7 1.0476", rob)
        # a result missing for the base is an error, not a silent gap
        with open(src, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(x) + "\n" for x in rows if x["allocator"] != "tlsf"))
        r = subprocess.run([sys.executable, ROBUSTNESS, "--from", src],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no result for tlsf", r.stderr)

    def test_independent_family(self):
        kinds = {}
        for name in gen_indep.SHAPES:
            kinds.setdefault(gen_indep.kind_of(name), []).append(name)
        self.assertEqual(sorted(kinds), sorted(gen_indep.KINDS))
        d = os.path.join(self.tmp.name, "indep")
        for seeds in ("1", "2"):
            r = subprocess.run([sys.executable, GEN_INDEP, "--out", d, "--seeds", seeds,
                                "--ops", "0.05"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        again = os.path.join(self.tmp.name, "indep-again")
        r = subprocess.run([sys.executable, GEN_INDEP, "--out", again, "--seeds", "1",
                            "--ops", "0.05"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in gen_indep.SHAPES:
            one = os.path.join(d, name + ".s1.trace")
            sizes, peak = parse(one)  # well formed, everything freed
            self.assertGreater(len(sizes), 10, name)
            self.assertGreater(peak, 1, name)
            self.assertEqual(read(one), read(os.path.join(again, name + ".s1.trace")),
                             name)
            self.assertNotEqual(read(one), read(os.path.join(d, name + ".s2.trace")),
                                name)
        # bench/robustness takes the family, reported whole (no development split)
        r = subprocess.run(
            [sys.executable, ROBUSTNESS, "--replay", REPLAY, "--family", "indep",
             "--traces", os.path.join(self.tmp.name, "indep-run"), "--seeds", "1",
             "--ops", "0.05", "--jobs", "2", "--only", "ichurn-01", "--only", "itrain",
             "--allocators", "arena,tlsf,first-fit"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| ichurn-01 | 1 |", r.stdout)
        self.assertIn("| itrain | 6 |", r.stdout)
        self.assertIn("| all | 7 |", r.stdout)
        self.assertNotIn("development", r.stdout)

    def test_bad_arguments_are_refused(self):
        for args in (["--only", "nosuch"], ["--seeds", "0"], ["--seeds", "3-1"],
                     ["--ops", "-1"], ["--allocators", "arena,tlsf"], ["--jobs", "0"],
                     ["--family", "other"], ["--family", "indep", "--only", "train"],
                     ["--baselines", os.path.join(self.tmp.name, "nosuch.jsonl")]):
            r = subprocess.run([sys.executable, ROBUSTNESS, "--replay", REPLAY] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertNotIn("Traceback", r.stderr, args)
        r = subprocess.run([sys.executable, GEN, "--out", self.tmp.name, "--only", "x"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: test_robustness.py GPUMEM_REPLAY", file=sys.stderr)
        sys.exit(2)
    REPLAY = sys.argv.pop(1)
    unittest.main()
