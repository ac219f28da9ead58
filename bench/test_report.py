#!/usr/bin/env python3
"""Tests of bench/report.py (suite bench-smoke): the tables and goal verdicts it
computes from run_all.sh's JSON lines, and that it rewrites only the text between
its markers. Standard library only: python3 bench/test_report.py."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402


def run(trace, allocator, ns, factor, ir=None, **extra):
    o = {"trace": trace, "allocator": allocator, "ops": 1000, "ns_per_op": ns,
         "peak_live_bytes": 100 << 20, "peak_reserved_bytes": 0, "failures": 0,
         "capacity_bytes": 200 << 20, "min_capacity_factor": factor,
         "repeat": 11, "build_type": "release", "optimized": True, "callgrind_ir": ir}
    o.update(extra)
    return o


LINES = [
    {"kind": "machine", "cpu": "Test CPU", "nproc": 2, "revision": "abc1234",
     "date": "2026-01-01", "compiler": "gcc 12", "valgrind": "valgrind-3.19.0"},
    run("training", "arena", 20.0, 1.0160, ir=180000),
    run("training", "api", 29.0, 1.0160, ir=350000),
    run("training", "clairvoyant", None, 1.0070),
    run("random", "arena", 40.0, 1.1160, ir=190000),
    run("random", "api", 70.0, 1.1160, ir=360000),
    dict(run("training", "api-growth", 30.0, None), peak_reserved_bytes=107 << 20),
    {"kind": "seed", "seed": 2, "trace": "training", "allocator": "arena",
     "min_capacity_factor": 1.0120},
    {"kind": "seed", "seed": 2, "trace": "training", "allocator": "clairvoyant",
     "min_capacity_factor": 1.0030},
    {"kind": "live_chunks", "live_chunks": 1000, "free_chunks": 150,
     "ns_per_op_recent": 50.0, "ns_per_op_random": 60.0,
     "tlsf_ns_per_op_recent": 36.0, "tlsf_ns_per_op_random": 37.0,
     "dependent_load_ns": 4.0, "metadata_bytes": 120000, "metadata_per_live_chunk": 120.0,
     "metadata_per_chunk": 104.0},
    {"kind": "live_chunks", "live_chunks": 1000000, "free_chunks": 100000,
     "ns_per_op_recent": 90.0, "ns_per_op_random": 400.0,
     "tlsf_ns_per_op_recent": 40.0, "tlsf_ns_per_op_random": 200.0,
     "dependent_load_ns": 190.0, "metadata_bytes": 100 << 20, "metadata_per_live_chunk": 105.0,
     "metadata_per_chunk": 95.0},
    {"kind": "pool_creation", "pool": "80GiB", "bytes": 80 << 30, "arena_us": 0.25,
     "arena_metadata_bytes": 31655, "api_us": 3.2},
]


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.results = os.path.join(self.dir.name, "results.jsonl")
        with open(self.results, "w", encoding="utf-8") as f:
            for o in LINES:
                f.write(json.dumps(o) + "\n")
        self.text = report.render(*report.load(self.results))

    def tearDown(self):
        self.dir.cleanup()

    def render(self, lines):
        """The report of `lines` instead of LINES."""
        with open(self.results, "w", encoding="utf-8") as f:
            for o in lines:
                f.write(json.dumps(o) + "\n")
        return report.render(*report.load(self.results))

    def row(self, start):
        rows = [ln for ln in self.text.splitlines() if ln.startswith(start)]
        self.assertEqual(len(rows), 1, "one row starting %r" % start)
        return rows[0]

    def test_runs_and_the_yardstick_without_timings(self):
        self.assertIn("| training | 1000 | 100.0 MiB | arena | 20.0 | 180 | 1.0160 |",
                      self.text)
        self.assertIn("| training | 1000 | 100.0 MiB | clairvoyant | – | – | 1.0070 |",
                      self.text)

    def test_capacity_goals_with_seeds_and_lifetimes(self):
        r = self.row("| min capacity factor ≤ 1.002 on training")
        self.assertIn("over 2 seeds mean 1.0140, 1.0120-1.0160", r)
        self.assertIn("(knowing every lifetime: 1.0070, mean 1.0050)", r)
        self.assertTrue(r.endswith("**not met** |"))
        self.assertTrue(self.row("| min capacity factor ≤ 1.13 on random").endswith(
            "**met** |"))

    def test_ratio_goals(self):
        self.assertIn("| api within 1.5× of arena on training | 29.0 / 20.0 = 1.45× | "
                      "**met** |", self.text)
        self.assertIn("| api within 1.5× of arena on random | 70.0 / 40.0 = 1.75× | "
                      "**not met** |", self.text)
        self.assertIn("90.0 / 50.0 = 1.80× (tlsf, no tree: 1.11×) | **met** |",
                      self.row("| ns/op at 1000000 live ≤ 2× at 1000 (recent)"))
        self.assertIn("400.0 / 60.0 = 6.67× (tlsf, no tree: 5.41×); a load from memory "
                      "costs 190 ns at 1000000 chunks, so a free of a victim chosen at "
                      "random waits 186 ns more than at 1000 (93 per operation), where "
                      "the goal leaves 60.0: out of reach on this machine | **not met** |",
                      self.row("| ns/op at 1000000 live ≤ 2× at 1000 (random)"))
        self.assertIn("| 1000000 | 100000 | 90.0 | 400.0 | 40.0 | 200.0 | 190.0 | 100.0 MiB |",
                      self.text)
        self.assertIn("1.0700× | **met** |",
                      self.row("| growth: peak reserved ≤ 1.10× peak live on training"))

    def test_the_memory_floor_is_out_of_reach_only_when_it_is(self):
        random_row = "| ns/op at 1000000 live ≤ 2× at 1000 (random)"
        # a machine whose loads from memory cost less than the room the goal leaves
        fast = self.render([dict(o, dependent_load_ns=100.0)
                            if o.get("live_chunks") == 1000000 else o for o in LINES])
        row = [ln for ln in fast.splitlines() if ln.startswith(random_row)][0]
        self.assertIn("(48 per operation), where the goal leaves 60.0 | **not met** |", row)
        # results from before the load was measured: no floor, and a dash in the table
        old = self.render([{k: v for k, v in o.items() if k != "dependent_load_ns"}
                           for o in LINES])
        row = [ln for ln in old.splitlines() if ln.startswith(random_row)][0]
        self.assertIn("(tlsf, no tree: 5.41×) | **not met** |", row)
        self.assertIn("| 40.0 | 200.0 | – | 100.0 MiB |", old)

    def test_no_scaling_goal_from_a_quick_run(self):
        text = self.render([o for o in LINES if o.get("live_chunks") != 1000000])
        self.assertNotIn("ns/op at 1000 live", text)
        self.assertIn("| metadata ≤ 128 B per chunk", text)

    def test_runs_without_timings_leave_out_the_time_goals(self):
        # run_all.sh with REPEAT=0: gpumem-replay writes "ns_per_op": null
        text = self.render([dict(o, ns_per_op=None) if "allocator" in o else o
                            for o in LINES])
        self.assertNotIn("| ns/op ≤", text)
        self.assertNotIn("| api within 1.5×", text)
        self.assertIn("| training | 1000 | 100.0 MiB | arena | – | 180 | 1.0160 |", text)
        self.assertIn("| min capacity factor ≤ 1.002 on training", text)

    def test_runs_with_failures_meet_no_goal(self):
        # a replay that failed allocations at twice the peak, a factor never found
        # (no clean pool up to 64x) and a growth run with failures
        lines = []
        for o in LINES:
            if o.get("trace") == "training" and o.get("allocator") == "arena":
                o = dict(o, failures=3, min_capacity_factor=None)
            elif o.get("allocator") == "api-growth":
                o = dict(o, failures=1)
            lines.append(o)
        self.text = self.render(lines)
        self.assertTrue(self.row("| instr/op ≤ 200 on training").endswith(
            "**not met** (3 failed allocations) |"))
        self.assertTrue(self.row("| ns/op ≤ 50 (VMA) on training").endswith(
            "**not met** (3 failed allocations) |"))
        self.assertEqual(self.row("| min capacity factor ≤ 1.002 on training"),
                         "| min capacity factor ≤ 1.002 on training | none up to 64× | "
                         "**not met** |")
        self.assertTrue(self.row("| api within 1.5× of arena on training").endswith(
            "**not met** (3 failed allocations) |"))
        self.assertTrue(self.row("| growth: peak reserved").endswith(
            "**not met** (1 failed allocation) |"))
        self.assertTrue(self.row("| instr/op ≤ 200 on random").endswith("**met** |"))

    def test_rounds_give_the_median_run(self):
        # api's first run fell in a slow spell; two more rounds of each allocator
        rounds = [{"kind": "round", "trace": "training", "allocator": a, "ns_per_op": ns}
                  for a, ns in (("arena", 21.0), ("api", 29.5), ("arena", 19.0),
                                ("api", 28.5), ("api", None))]
        lines = [dict(o, ns_per_op=60.0) if (o.get("trace"), o.get("allocator")) ==
                 ("training", "api") else o for o in LINES]
        self.text = self.render(lines + rounds)
        self.assertIn("| api within 1.5× of arena on training | 29.5 / 20.0 = 1.48× | "
                      "**met** |", self.text)
        self.assertIn("arena and api: the median of 3 such runs, taken alternately",
                      self.text)
        # without rounds, the caption says nothing of them
        self.assertNotIn("taken alternately", self.render(LINES))

    def test_only_the_marked_sections_are_rewritten(self):
        docs = os.path.join(self.dir.name, "bench.md")
        readme = os.path.join(self.dir.name, "README.md")
        with open(docs, "w", encoding="utf-8") as f:
            f.write("prose before\n%s\nold table\n%s\nprose after\n" % (report.BEGIN,
                                                                       report.END))
        with open(readme, "w", encoding="utf-8") as f:
            f.write("# gpumem\nno markers yet\n")
        self.assertEqual(report.main([self.results, docs, readme]), 0)
        with open(docs, encoding="utf-8") as f:
            d = f.read()
        self.assertTrue(d.startswith("prose before\n" + report.BEGIN + "\nCommit `abc1234`"))
        self.assertTrue(d.endswith(report.END + "\nprose after\n"))
        self.assertNotIn("old table", d)
        with open(readme, encoding="utf-8") as f:
            r = f.read()
        self.assertTrue(r.startswith("# gpumem\nno markers yet\n"))
        self.assertIn(report.README_BEGIN + "\nCommit `abc1234`", r)
        self.assertIn("| training | clairvoyant | – | – | 1.0070 | 1.0050 |", r)
        self.assertTrue(r.rstrip().endswith(report.README_END))


if __name__ == "__main__":
    unittest.main()
