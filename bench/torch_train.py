#!/usr/bin/env python3
"""A training step and a batch-size finder under gpumem.torch against PyTorch's
own allocator, on a real GPU (issue 31's goals on a GPU).

    python3 bench/torch_train.py [--rounds 8] [--steps 50] [--layers 12]
                                 [--dim 1024] [--batch 8] [--finder] [--json]

Each round runs one child process per allocator, in an order that alternates
from round to round (PyTorch's allocator first in odd rounds), since the
allocator is chosen before CUDA starts and the GPU's clocks drift over a run.

Training (the default): a GPT-like model (token embedding, `--layers`
pre-norm transformer layers of width `--dim` with 16 heads and a causal mask,
a tied head), AdamW, bf16 autocast, `--batch` sequences whose length is drawn
again every step from 128 to 1,024 tokens (one seeded draw, the same for both
allocators), `--steps` steps after 5 untimed ones; a child reports the median
step in ms (each step ends with a synchronize) and torch.cuda's peak reserved
bytes. The goal: the median over the rounds of gpumem's median step divided by
PyTorch's, at most 1.00.

--finder: accelerate's find_executable_batch_size, without accelerate: start at
1,024 sequences of 1,024 tokens (a 12-layer, 768-wide model, GPT-2's size) and
multiply the batch by 0.9 after each torch.cuda.OutOfMemoryError (or a
RuntimeError that says "out of memory", which is what gpumem.torch raises where
its C++ library is not built), emptying the cache between tries; a child
reports the seconds until one step ran and the batch it ran. The goal: gpumem's
seconds no more than PyTorch's.

The report: one line per round and the medians; --json: one JSON object.
Exit status 77 where PyTorch is missing or sees no CUDA device. Never run on a
GPU yet: written in a session without one (the arithmetic is tested by
bench/test_torch_train.py with canned rounds).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KINDS = ("pytorch", "gpumem")


def _oom(torch, e):
    """Whether e is an out of memory, whichever type the allocator raised."""
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(e, oom) or (isinstance(e, RuntimeError) and
                                  "out of memory" in str(e))


def _model(torch, layers, dim, vocab=32000, device="cuda"):
    nn = torch.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            layer = nn.TransformerEncoderLayer(dim, 16, 4 * dim, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(dim)

        def forward(self, tokens):
            n = tokens.shape[1]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(
                n, device=tokens.device)
            h = self.body(self.emb(tokens), mask=mask, is_causal=True)
            return self.norm(h) @ self.emb.weight.t()

    return GPT().to(device)


def _step(torch, model, opt, batch, seq, vocab=32000, device="cuda"):
    tokens = torch.randint(0, vocab, (batch, seq + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                 tokens[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def child(args):
    """One allocator's run in this process: prints one JSON line."""
    try:
        import torch
    except ImportError:
        print("torch_train: PyTorch is not installed", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("torch_train: PyTorch sees no CUDA device", file=sys.stderr)
        return 77
    if args.child == "gpumem":
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import gpumem.torch
        gpumem.torch.use()
    torch.manual_seed(0)
    if args.finder:
        model = _model(torch, 12, 768)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        batch, t0 = 1024, time.perf_counter()
        while batch > 0:
            try:
                _step(torch, model, opt, batch, 1024)
                torch.cuda.synchronize()
                break
            except Exception as e:  # noqa: BLE001 - told apart by _oom
                if not _oom(torch, e):
                    raise
                opt.zero_grad(set_to_none=True)
                del e
                import gc
                gc.collect()
                torch.cuda.empty_cache()
                batch = int(batch * 0.9)
        out = {"kind": args.child, "seconds": time.perf_counter() - t0, "batch": batch}
    else:
        model = _model(torch, args.layers, args.dim)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        import random
        rng = random.Random(1)
        seqs = [rng.randint(128, 1024) for _ in range(args.steps + 5)]
        times = []
        for i, seq in enumerate(seqs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            _step(torch, model, opt, args.batch, seq)
            torch.cuda.synchronize()
            if i >= 5:
                times.append((time.perf_counter() - t0) * 1e3)
        out = {"kind": args.child, "median_ms": statistics.median(times),
               "peak_reserved_bytes": torch.cuda.max_memory_reserved()}
    print(json.dumps(out))
    return 0


def order(round_index):
    """The allocators' order in round i (from 0): PyTorch's first in even ones."""
    return KINDS if round_index % 2 == 0 else KINDS[::-1]


def summarise(rounds, finder):
    """rounds: a list of {kind: child result}; the figures of the report."""
    key = "seconds" if finder else "median_ms"
    ratios = [r["gpumem"][key] / r["pytorch"][key] for r in rounds]
    out = {"mode": "finder" if finder else "training", "rounds": len(rounds),
           "ratios": ratios, "median_ratio": statistics.median(ratios),
           "pytorch_" + key: statistics.median(r["pytorch"][key] for r in rounds),
           "gpumem_" + key: statistics.median(r["gpumem"][key] for r in rounds)}
    if finder:
        out["batches"] = {k: sorted({r[k]["batch"] for r in rounds}) for k in KINDS}
    else:
        out["peak_reserved_bytes"] = {
            k: max(r[k]["peak_reserved_bytes"] for r in rounds) for k in KINDS}
    out["goal_met"] = out["median_ratio"] <= 1.0
    return out


def run_child(args, kind):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind,
           "--steps", str(args.steps), "--layers", str(args.layers),
           "--dim", str(args.dim), "--batch", str(args.batch)]
    if args.finder:
        cmd.append("--finder")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode == 77:
        print(r.stderr.strip(), file=sys.stderr)
        sys.exit(77)
    if r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (kind, r.returncode, r.stderr.strip()))
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--finder", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if args.rounds < 1 or args.steps < 1:
        print("torch_train: --rounds and --steps must be at least 1", file=sys.stderr)
        return 2
    rounds = []
    for i in range(args.rounds):
        got = {k: run_child(args, k) for k in order(i)}
        rounds.append(got)
        key = "seconds" if args.finder else "median_ms"
        print("round %d: pytorch %.2f, gpumem %.2f (%s), ratio %.3f" %
              (i + 1, got["pytorch"][key], got["gpumem"][key], key,
               got["gpumem"][key] / got["pytorch"][key]), file=sys.stderr)
    out = summarise(rounds, args.finder)
    if args.json:
        print(json.dumps(out))
    else:
        print("%s, %d rounds: median ratio gpumem / pytorch %.3f (goal <= 1.00: %s)" %
              (out["mode"], out["rounds"], out["median_ratio"],
               "met" if out["goal_met"] else "not met"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
