#!/usr/bin/env python3
"""Tests of bench/gen_traces.py (suite bench-smoke): its traces are deterministic
for a seed, well formed in DESIGN.md's format, shaped as issue 5 describes them
(sizes, live counts, --scale), and bad arguments are refused with a message, not a
traceback. Standard library only: python3 bench/test_gen_traces.py."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "gen_traces.py")
MIB = 1 << 20
OPS = "0.05"  # short traces: the churns keep their live counts, the runs are shorter


def generate(out, *args):
    return subprocess.run([sys.executable, GEN, "--out", out] + list(args),
                          capture_output=True, text=True)


def parse(path):
    """The sizes allocated, in order, and the most blocks live at once; fails the
    calling test (by AssertionError) on any line out of the format."""
    live, sizes, peak = set(), [], 0
    with open(path, encoding="ascii") as f:
        for n, line in enumerate(f, 1):
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            where = "%s:%d: %r" % (os.path.basename(path), n, line)
            if words[0] == "a":
                assert len(words) == 3, where
                assert words[1] not in live, "allocated twice: " + where
                assert int(words[2]) >= 1, where
                live.add(words[1])
                sizes.append(int(words[2]))
                peak = max(peak, len(live))
            else:
                assert words[0] == "f" and len(words) == 2, where
                assert words[1] in live, "freed while not live: " + where
                live.remove(words[1])
    assert not live, "%s ends with %d blocks live" % (path, len(live))
    return sizes, peak


class Generated(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs = {}
        for name, args in (("a", ("--seed", "1")), ("b", ("--seed", "1")),
                           ("c", ("--seed", "2")),
                           ("half", ("--seed", "1", "--only", "random", "--scale", "0.5")),
                           ("double", ("--seed", "1", "--only", "random", "--scale", "2"))):
            out = os.path.join(cls.tmp.name, name)
            r = generate(out, "--ops", OPS, *args)
            assert r.returncode == 0, r.stderr
            cls.dirs[name] = out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def read(self, run, workload):
        with open(os.path.join(self.dirs[run], workload + ".trace"), "rb") as f:
            return f.read()

    def test_a_seed_gives_the_same_bytes_and_another_seed_others(self):
        for w in ("training", "serving", "random", "tiny"):
            self.assertEqual(self.read("a", w), self.read("b", w), w)
            self.assertNotEqual(self.read("a", w), self.read("c", w), w)

    def test_every_trace_is_well_formed_and_frees_everything(self):
        for run in ("a", "c"):
            for w in ("training", "serving", "random", "tiny"):
                sizes, _ = parse(os.path.join(self.dirs[run], w + ".trace"))
                self.assertGreater(len(sizes), 100, w)

    def test_random_sizes_span_256_bytes_to_256_mib_and_follow_scale(self):
        sizes, _ = parse(os.path.join(self.dirs["a"], "random.trace"))
        self.assertGreaterEqual(min(sizes), 256)
        self.assertLessEqual(max(sizes), 256 * MIB)
        self.assertLess(min(sizes), 4096)  # log-uniform: the small end is drawn too
        self.assertGreater(max(sizes), 64 * MIB)
        # the same draws, every size times the scale (to the byte, truncated)
        for run, scale in (("half", 0.5), ("double", 2.0)):
            scaled, _ = parse(os.path.join(self.dirs[run], "random.trace"))
            self.assertEqual(len(scaled), len(sizes))
            for s, t in zip(sizes, scaled):
                self.assertLessEqual(abs(t - s * scale), 1 + 2 * scale, (s, t, scale))

    def test_tiny_churn_keeps_20000_blocks_of_32_bytes_to_16_kib_live(self):
        sizes, peak = parse(os.path.join(self.dirs["a"], "tiny.trace"))
        self.assertGreaterEqual(peak, 20000)
        self.assertLess(peak, 21000)
        self.assertGreaterEqual(min(sizes), 32)
        self.assertLessEqual(max(sizes), 16 * 1024)


class BadArguments(unittest.TestCase):
    def refused(self, *args):
        with tempfile.TemporaryDirectory() as tmp:
            r = generate(os.path.join(tmp, "out"), *args)
        self.assertNotEqual(r.returncode, 0, args)
        self.assertIn("gen_traces.py", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        return r.stderr

    def test_scale_and_ops_must_be_positive_numbers(self):
        for args in (("--scale", "-1"), ("--scale", "0"), ("--scale", "nan"),
                     ("--ops", "0"), ("--ops", "inf"), ("--ops", "x")):
            self.assertIn("--" + args[0][2:], self.refused(*args))

    def test_a_scale_that_takes_live_bytes_past_2_63_is_refused(self):
        # replay sums live bytes in 64 bits: such a trace could not be replayed
        for scale in ("1e12", "1e300", "1e308"):
            for workload in ("random", "training"):
                err = self.refused("--only", workload, "--ops", OPS, "--scale", scale)
                self.assertIn("--scale", err)
                self.assertIn("would pass 2^63", err)

    def test_an_output_folder_that_cannot_be_made_is_named(self):
        with tempfile.NamedTemporaryFile() as f:  # a file where the folder's parent is
            r = generate(os.path.join(f.name, "out"), "--only", "random", "--ops", OPS)
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot make the folder", r.stderr)
        self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
