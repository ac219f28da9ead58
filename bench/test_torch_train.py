#!/usr/bin/env python3
"""bench/torch_train.py without a GPU: the alternation of the allocators, the
arithmetic of its report on canned rounds, its refusals, and its exit status 77
where PyTorch is missing or sees no GPU (the training itself runs only on a
GPU: never yet)."""

import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_train  # noqa: E402


class TorchTrain(unittest.TestCase):
    def test_the_order_alternates(self):
        self.assertEqual(torch_train.order(0), ("pytorch", "gpumem"))
        self.assertEqual(torch_train.order(1), ("gpumem", "pytorch"))
        self.assertEqual(torch_train.order(2), ("pytorch", "gpumem"))

    def test_training_rounds(self):
        rounds = [{"pytorch": {"median_ms": p, "peak_reserved_bytes": 10},
                   "gpumem": {"median_ms": g, "peak_reserved_bytes": 9 + i}}
                  for i, (p, g) in enumerate([(30.0, 33.0), (40.0, 36.0), (35.0, 35.0)])]
        out = torch_train.summarise(rounds, finder=False)
        self.assertEqual(out["mode"], "training")
        self.assertEqual(out["ratios"], [1.1, 0.9, 1.0])
        self.assertAlmostEqual(out["median_ratio"], 1.0)
        self.assertTrue(out["goal_met"])
        self.assertEqual(out["pytorch_median_ms"], 35.0)
        self.assertEqual(out["peak_reserved_bytes"], {"pytorch": 10, "gpumem": 11})
        rounds[2]["gpumem"]["median_ms"] = 36.0
        self.assertFalse(torch_train.summarise(rounds, finder=False)["goal_met"])

    def test_finder_rounds(self):
        rounds = [{"pytorch": {"seconds": 12.0, "batch": 87},
                   "gpumem": {"seconds": 29.0, "batch": 87}},
                  {"pytorch": {"seconds": 10.0, "batch": 87},
                   "gpumem": {"seconds": 11.0, "batch": 96}}]
        out = torch_train.summarise(rounds, finder=True)
        self.assertEqual(out["mode"], "finder")
        self.assertAlmostEqual(out["median_ratio"], (29 / 12 + 1.1) / 2)
        self.assertEqual(out["batches"], {"pytorch": [87], "gpumem": [87, 96]})
        self.assertFalse(out["goal_met"])

    def test_a_step_of_the_model_on_the_cpu(self):
        # the model and the step against the real package, small and on the CPU
        try:
            import torch
        except ImportError:
            self.skipTest("PyTorch is not installed (pip install torch)")
        torch.manual_seed(0)
        model = torch_train._model(torch, 2, 64, vocab=100, device="cpu")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        before = [p.detach().clone() for p in model.parameters()]
        torch_train._step(torch, model, opt, 2, 16, vocab=100, device="cpu")
        self.assertTrue(any(not torch.equal(a, b.detach())
                            for a, b in zip(before, model.parameters())))
        self.assertTrue(torch_train._oom(torch, RuntimeError("CUDA out of memory. x")))
        self.assertFalse(torch_train._oom(torch, RuntimeError("shape mismatch")))

    def test_refusals_and_no_gpu(self):
        script = os.path.join(HERE, "torch_train.py")
        r = subprocess.run([sys.executable, script, "--rounds", "0"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("at least 1", r.stderr)
        try:
            import torch
            gpu = torch.cuda.is_available()
        except ImportError:
            gpu = False
        if gpu:
            self.skipTest("a GPU is here: the no-GPU exit is not what happens")
        r = subprocess.run([sys.executable, script, "--rounds", "1", "--steps", "1"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 77, r.stderr)
        self.assertTrue("PyTorch is not installed" in r.stderr or
                        "sees no CUDA device" in r.stderr, r.stderr)


if __name__ == "__main__":
    unittest.main()
