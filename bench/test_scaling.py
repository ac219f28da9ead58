#!/usr/bin/env python3
"""Smoke test of gpumem-scaling (suite bench-smoke): its quick run's JSON lines are
well formed and complete, and its figures are of the right kind. Never a time
bound: the bench measures, tests do not. Standard library only:
python3 bench/test_scaling.py build/bench/gpumem-scaling."""

import json
import subprocess
import sys
import unittest

SCALING = None  # the program under test, from the command line

LIVE_KEYS = {"kind", "live_chunks", "free_chunks", "ns_per_op_recent",
             "ns_per_op_random", "tlsf_ns_per_op_recent", "tlsf_ns_per_op_random",
             "dependent_load_ns", "metadata_bytes", "metadata_per_live_chunk",
             "metadata_per_chunk"}
POOL_KEYS = {"kind", "pool", "bytes", "arena_us", "arena_metadata_bytes", "api_us"}


class ScalingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        out = subprocess.run([SCALING, "--quick", "--json"], capture_output=True,
                             text=True, timeout=300, check=True).stdout
        cls.lines = [json.loads(ln) for ln in out.splitlines()]

    def of_kind(self, kind):
        return [o for o in self.lines if o["kind"] == kind]

    def test_live_chunks_lines(self):
        live = self.of_kind("live_chunks")
        self.assertEqual([o["live_chunks"] for o in live], [1000, 10000])
        for o in live:
            self.assertEqual(set(o), LIVE_KEYS)
            for k in LIVE_KEYS - {"kind"}:
                self.assertGreater(o[k], 0, k)
            self.assertAlmostEqual(o["metadata_per_live_chunk"],
                                   o["metadata_bytes"] / o["live_chunks"], delta=0.1)
            self.assertAlmostEqual(
                o["metadata_per_chunk"],
                o["metadata_bytes"] / (o["live_chunks"] + o["free_chunks"]), delta=0.1)

    def test_pool_lines(self):
        pools = self.of_kind("pool_creation")
        self.assertEqual([(o["pool"], o["bytes"]) for o in pools],
                         [("1GiB", 1 << 30), ("80GiB", 80 << 30), ("1TiB", 1 << 40)])
        for o in pools:
            self.assertEqual(set(o), POOL_KEYS)
            # host metadata does not grow with the bytes of the pool
            self.assertEqual(o["arena_metadata_bytes"], pools[0]["arena_metadata_bytes"])

    def test_nothing_else(self):
        self.assertEqual(len(self.lines), 5)

    def test_bad_arguments_are_refused(self):
        r = subprocess.run([SCALING, "--bogus"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: gpumem-scaling", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_scaling.py GPUMEM-SCALING")
    SCALING = sys.argv.pop(1)
    unittest.main()
