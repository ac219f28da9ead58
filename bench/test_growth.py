#!/usr/bin/env python3
"""Smoke test of bench/growth (suite bench-smoke): on very short traces (one seed)
it reports a row per workload whose ratios are peak reserved over the trace's raw
peak (never below 1: a pool holds what is live, nor below the floor of whole
granules over rounded requests), writes its JSON lines, and
compares a run with them. Never a figure of merit (docs/bench.md, growth).

    python3 bench/test_growth.py BUILD/bench/gpumem-replay
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GROWTH = os.path.join(HERE, "growth")
REPLAY = None  # set from argv


def run(*args):
    return subprocess.run([sys.executable, GROWTH, "--replay", REPLAY, "--ops", "0.02",
                           "--seeds", "1", "--jobs", "2"] + list(args),
                          capture_output=True, text=True)


class Growth(unittest.TestCase):
    def test_four_traces_and_a_comparison(self):
        with tempfile.TemporaryDirectory() as tmp:
            res = os.path.join(tmp, "r.jsonl")
            r = run("--traces", tmp, "--results", res)
            self.assertEqual(r.returncode, 0, r.stderr)
            for w in ["training", "serving", "random", "tiny"]:
                self.assertIn("| %s |" % w, r.stdout)
            with open(res) as f:
                rows = [json.loads(l) for l in f]
            self.assertEqual(len(rows), 4)
            for row in rows:
                self.assertGreaterEqual(row["ratio"], 1.0)
                self.assertAlmostEqual(row["ratio"],
                                       row["peak_reserved"] / row["raw_peak_live"])
                # the floor: whole 2 MiB granules over 256-byte rounded live bytes,
                # which no pool can go below (so neither can gpumem)
                self.assertGreaterEqual(row["floor"], 1.0)
                self.assertLessEqual(row["floor"], row["ratio"])
                self.assertEqual(round(row["floor"] * row["raw_peak_live"]) % (2 << 20), 0)
            self.assertIn("| floor | at floor |", r.stdout)
            r = run("--traces", tmp, "--from", res)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("worse by more than 0.5%: 0", r.stdout)

    def test_trim_off_and_warm_maps(self):
        with tempfile.TemporaryDirectory() as tmp:
            on, off = os.path.join(tmp, "on.jsonl"), os.path.join(tmp, "off.jsonl")
            r = run("--traces", tmp, "--results", on)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run("--traces", tmp, "--results", off, "--no-trim")
            self.assertEqual(r.returncode, 0, r.stderr)
            rows = {}
            for name in (on, off):
                with open(name) as f:
                    rows[name] = {j["workload"]: j for j in map(json.loads, f)}
            # the same traces and the same peaks of live bytes either way
            self.assertEqual(sorted(rows[on]), sorted(rows[off]))
            for w in rows[on]:
                self.assertEqual(rows[on][w]["raw_peak_live"], rows[off][w]["raw_peak_live"])
                # the trim leaves placement to the arena: never above no trim
                self.assertLessEqual(rows[on][w]["peak_reserved"], rows[off][w]["peak_reserved"])
            if shutil.which("strace") is None:
                self.skipTest("no strace for --warm")
            r = run("--traces", tmp, "--warm")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("warm maps / 1,000 ops", r.stdout)
            self.assertIn("warm replays map", r.stdout)

    def test_replays_in_one_process(self):
        with tempfile.TemporaryDirectory() as tmp:
            rows = {}
            for name, extra in (("one", []), ("three", ["--replays", "3"]),
                                ("three-off", ["--replays", "3", "--no-trim"])):
                res = os.path.join(tmp, name + ".jsonl")
                r = run("--traces", tmp, "--results", res, *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(res) as f:
                    rows[name] = {j["workload"]: j for j in map(json.loads, f)}
            for w, row in rows["three"].items():
                self.assertEqual(row["replays"], 3)
                # the peak of three replays holds the first one's
                self.assertGreaterEqual(row["peak_reserved"], rows["one"][w]["peak_reserved"])
                self.assertLessEqual(row["peak_reserved"],
                                     rows["three-off"][w]["peak_reserved"])
            r = run("--traces", tmp, "--replays", "0")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--replays must be at least 1", r.stderr)

    def test_family_shape(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run("--traces", tmp, "--family", "--only", "conv-02")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("| conv-02 |", r.stdout)
            self.assertIn("all 1 traces", r.stdout)


if __name__ == "__main__":
    REPLAY = sys.argv.pop(1)
    unittest.main()
