#!/usr/bin/env python3
"""Smoke test of bench/growth (suite bench-smoke): on very short traces (one seed)
it reports a row per workload whose ratios are peak reserved over the trace's raw
peak (never below 1: a pool holds what is live, nor below the floor of whole
granules over rounded requests), writes its JSON lines, and
compares a run with them; its driver calls per 1,000 operations are the
replay's, and gpumem-replay's driver figures add up (calls per 1,000 operations,
their price by a given list, the modelled time). Never a figure of merit
(docs/bench.md, growth), nor a time.

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
            self.assertIn("| floor | at floor | calls / 1,000 ops |", r.stdout)
            # the calls column: the replay's driver calls over its operations,
            # per workload (one trace each here) and over all
            for row in rows:
                self.assertGreater(row["driver_ops"], 0)
                self.assertGreater(row["driver_calls"], 0)  # growing from nothing
                line = [l for l in r.stdout.splitlines()
                        if l.startswith("| %s |" % row["workload"])][0]
                self.assertEqual(line.split("|")[7].strip(),
                                 "%.3f" % (1000.0 * row["driver_calls"] / row["driver_ops"]))
            total = 1000.0 * sum(x["driver_calls"] for x in rows) / sum(
                x["driver_ops"] for x in rows)
            self.assertIn("; %.3f driver calls per 1,000 operations" % total, r.stdout)
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

    def test_the_trims_window(self):
        # GPUMEM_GROWTH_TRIM_WINDOW through --window: every window places as no
        # trim does, so each peak is at most no trim's; a window of 0 (every free
        # granule idle) trims on these traces, the default (1) maps nothing more
        # than no trim once warm
        with tempfile.TemporaryDirectory() as tmp:
            rows = {}
            for name, extra in (("w0", ["--window", "0"]), ("w1", ["--window", "1"]),
                                ("default", []), ("off", ["--no-trim"])):
                res = os.path.join(tmp, name + ".jsonl")
                r = run("--traces", tmp, "--results", res, "--replays", "2", *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                with open(res) as f:
                    rows[name] = {j["workload"]: j for j in map(json.loads, f)}
            for w in rows["off"]:
                for name in ("w0", "w1", "default"):
                    self.assertLessEqual(rows[name][w]["peak_reserved"],
                                         rows["off"][w]["peak_reserved"])
                self.assertEqual(rows["w1"][w]["peak_reserved"],
                                 rows["default"][w]["peak_reserved"])
                self.assertEqual(rows["w1"][w]["driver_calls"],
                                 rows["default"][w]["driver_calls"])
            self.assertTrue(any(rows["w0"][w]["peak_reserved"] <
                                rows["off"][w]["peak_reserved"] for w in rows["off"]))
            r = run("--traces", tmp, "--window", "1.5")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--window must be from 0 to 1", r.stderr)

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
                # replays 2 and 3 are timed: their calls, and the modelled time
                self.assertEqual(row["driver_ops"], 2 * rows["one"][w]["driver_ops"])
                self.assertIsNotNone(row["modelled_ns_per_op"])
                # the peak of three replays holds the first one's
                self.assertGreaterEqual(row["peak_reserved"], rows["one"][w]["peak_reserved"])
                self.assertLessEqual(row["peak_reserved"],
                                     rows["three-off"][w]["peak_reserved"])
            r = run("--traces", tmp, "--replays", "0")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--replays must be at least 1", r.stderr)

    def test_the_replays_driver_figures_add_up(self):
        # a price list of round numbers, so that the arithmetic can be redone here
        prices = {"cuMemMap": (1000, 4096), "cuMemCreate": (500, 0)}
        spec = "*:100," + ",".join("%s:%d:%d" % (k, a, b) for k, (a, b) in prices.items())
        with tempfile.TemporaryDirectory() as tmp:
            r = run("--traces", tmp)  # generates the traces
            self.assertEqual(r.returncode, 0, r.stderr)
            trace = os.path.join(tmp, "s1", "random.trace")
            env = dict(os.environ, GPUMEM_BENCH_PRICES=spec)
            for repeat in (0, 1, 3):
                out = subprocess.run([REPLAY, "--allocator", "api", "--growth", "--repeat",
                                      str(repeat), "--json", trace],
                                     capture_output=True, text=True, env=env, check=True)
                j = json.loads(out.stdout)
                self.assertEqual(j["prices"], spec)
                self.assertEqual(j["driver_ops"], j["ops"] * max(repeat, 1))
                calls = j["driver_calls"]
                self.assertIn("cuMemMap", calls)  # every entry point, zeros included
                n = sum(c["calls"] for c in calls.values())
                if repeat == 0:
                    self.assertGreater(n, 0)  # the cold replay maps
                self.assertAlmostEqual(j["driver_calls_per_1000_ops"],
                                       1000.0 * n / j["driver_ops"], delta=0.001)
                self.assertAlmostEqual(j["driver_ns_per_op"], sum(
                    c["ns"] for c in calls.values()) / j["driver_ops"], delta=0.01)
                for k, c in calls.items():
                    fixed, per_mib = prices.get(k, (100, 0))
                    self.assertAlmostEqual(c["price_ns"], c["calls"] * fixed +
                                           c["bytes"] * per_mib / 2.0**20, delta=0.5)
                price = sum(c["price_ns"] for c in calls.values())
                self.assertAlmostEqual(j["priced_driver_ns_per_op"],
                                       price / j["driver_ops"], delta=0.01)
                if repeat == 0:  # no timed replay, no time
                    self.assertIsNone(j["modelled_ns_per_op"])
                else:  # the time measured, less the driver's own, plus the price
                    self.assertAlmostEqual(j["modelled_ns_per_op"], j["ns_per_op"] -
                                           j["driver_ns_per_op"] +
                                           j["priced_driver_ns_per_op"], delta=0.02)
            # an allocator that counts no calls reports none; a bad list is refused
            out = subprocess.run([REPLAY, "--allocator", "arena", "--repeat", "1", "--json",
                                  trace], capture_output=True, text=True, check=True)
            j = json.loads(out.stdout)
            self.assertIsNone(j["driver_calls"])
            self.assertIsNone(j["modelled_ns_per_op"])
            bad = subprocess.run([REPLAY, "--allocator", "api", "--repeat", "0", trace],
                                 capture_output=True, text=True,
                                 env=dict(os.environ, GPUMEM_BENCH_PRICES="cuMemMap:fast"))
            self.assertEqual(bad.returncode, 2)
            self.assertIn("GPUMEM_BENCH_PRICES: 'cuMemMap:fast' is not", bad.stderr)

    def test_family_shape(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run("--traces", tmp, "--family", "--only", "conv-02")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("| conv-02 |", r.stdout)
            self.assertIn("all 1 traces", r.stdout)

    def test_independent_family_shape(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run("--traces", tmp, "--family", "indep", "--only", "itiny-01")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("| itiny-01 |", r.stdout)
            self.assertIn("all 1 traces", r.stdout)
            self.assertTrue(os.path.exists(os.path.join(tmp, "itiny-01.s1.trace")))
            bad = run("--traces", tmp, "--family", "other")
            self.assertEqual(bad.returncode, 2)

    def test_another_allocator(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = run("--traces", tmp, "--allocator", "api-async",
                    "--results", os.path.join(tmp, "rows.jsonl"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("all 4 traces", r.stdout)
            # the simulated GPU's mappings are counted only where it is the GPU
            bad = run("--traces", tmp, "--allocator", "api-cuda", "--warm")
            self.assertEqual(bad.returncode, 2)
            self.assertIn("--warm counts the simulated GPU's mappings", bad.stderr)


if __name__ == "__main__":
    REPLAY = sys.argv.pop(1)
    unittest.main()
