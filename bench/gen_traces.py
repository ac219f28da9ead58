#!/usr/bin/env python3
"""Allocation traces for gpumem-replay, in DESIGN.md's format ("a ID SIZE", "f ID").

Four workloads, each seeded and deterministic (the same arguments give the same
bytes on every machine and Python 3 version: only random.Random's integer and
float draws are used), each ending with every block freed:

  training  a GPT-like transformer trained with bf16 activations and fp32 master
            weights: weights first, a sequence length redrawn every step,
            activations allocated layer by layer in the forward pass and freed in
            reverse during the backward pass while weight gradients are allocated,
            cuBLAS-like workspaces during the matrix products, small temporaries,
            Adam's state allocated lazily at the first optimizer step, gradients
            freed after each step (zero_grad(set_to_none=True)).
  serving   LLM inference serving with continuous batching: weights, then
            requests that arrive, prefill (large temporaries), decode token by
            token with small per-step temporaries, and keep their KV cache in
            blocks that grow geometrically (16, 32, 64, ... tokens) as the sequence
            grows; a request ends at a random length and frees all its blocks.
  random    sizes log-uniform in [256 B, 256 MiB]; the number of live blocks walks
            randomly around a target; each free picks a random live block.
  tiny      tiny-block churn: 20,000 live blocks log-uniform in [32 B, 16 KiB],
            replaced in random order.

--scale multiplies every workload's byte sizes (model width for training and
serving); --ops scales their lengths. Standard library only.

    python3 bench/gen_traces.py --out build/bench/traces            # all four
    python3 bench/gen_traces.py --out DIR --only tiny --ops 0.05
"""

import argparse
import math
import os
import random
import sys

MIB = 1 << 20
# what a trace may hold live at once: gpumem-replay sums live bytes in 64 bits
MAX_LIVE_BYTES = 1 << 63


class TooLarge(ValueError):
    """A trace whose live bytes would pass MAX_LIVE_BYTES (a --scale too large)."""


class Trace:
    """Collects operations; IDs are short decimal tokens, never reused."""

    def __init__(self, path):
        self.path = path
        self.lines = []
        self.next_id = 0
        self.live = {}
        self.live_bytes = 0
        self.ops = 0

    def comment(self, text):
        self.lines.append("# " + text)

    def alloc(self, size):
        if not self.live_bytes + size < MAX_LIVE_BYTES:  # also inf and nan
            raise TooLarge(size)
        size = max(1, int(size))
        self.live_bytes += size
        ident = self.next_id
        self.next_id += 1
        self.lines.append("a %d %d" % (ident, size))
        self.live[ident] = size
        self.ops += 1
        return ident

    def free(self, ident):
        self.live_bytes -= self.live.pop(ident)
        self.lines.append("f %d" % ident)
        self.ops += 1

    def free_all(self):
        for ident in sorted(self.live, reverse=True):
            self.free(ident)

    def write(self):
        self.free_all()
        with open(self.path, "w", encoding="ascii", newline="\n") as f:
            f.write("\n".join(self.lines))
            f.write("\n")
        return self.ops


# ----------------------------------------------------------------- training --

def gen_training(t, rng, scale, length):
    d = max(64, int(round(1024 * scale / 64.0)) * 64)  # model width
    layers, heads, vocab, batch = 12, 16, 32000, 8
    steps = max(2, int(round(60 * length)))
    bf16, fp32 = 2, 4
    t.comment("training: GPT-like, d=%d layers=%d heads=%d vocab=%d batch=%d steps=%d"
              % (d, layers, heads, vocab, batch, steps))

    def layer_params():
        # (name, elements): fp32 master weights of one transformer block
        return [("ln1.w", d), ("ln1.b", d), ("qkv.w", 3 * d * d), ("qkv.b", 3 * d),
                ("proj.w", d * d), ("proj.b", d), ("ln2.w", d), ("ln2.b", d),
                ("fc1.w", 4 * d * d), ("fc1.b", 4 * d), ("fc2.w", 4 * d * d),
                ("fc2.b", d)]

    params = [("embed", vocab * d), ("pos", 2048 * d)]
    for _ in range(layers):
        params += layer_params()
    params += [("lnf.w", d), ("lnf.b", d)]
    weights = [t.alloc(n * fp32) for _, n in params]
    adam = None

    def small():
        # a scalar, a reduction buffer, an index list: 4 B to 64 KiB
        return int(math.exp(rng.uniform(math.log(4), math.log(64 << 10))))

    def gemm(out_bytes):
        """A matrix product: its output, then, half of the time, a cuBLAS
        workspace for the duration of the call. The output comes first, as in
        the frameworks: TensorFlow's kernels call allocate_output before the
        BLAS call asks its scratch allocator for a workspace, and PyTorch's
        addmm allocates the result before cublasLt's workspace."""
        out = t.alloc(out_bytes)
        if rng.random() < 0.5:
            t.free(t.alloc(rng.choice((4 * MIB, 4 * MIB, 8 * MIB, 32 * MIB))))
        return out

    for step in range(steps):
        seq = 64 * rng.randint(4, 32)  # 256 .. 2048 tokens, redrawn every step
        tok = batch * seq
        h = tok * d * bf16
        saved = []  # per layer: the activations kept for the backward pass
        ids = t.alloc(tok * 8)
        x = t.alloc(h)  # embeddings
        for _ in range(layers):
            acts = []
            ln1 = t.alloc(h)
            acts.append(ln1)
            acts.append(t.alloc(tok * fp32 * 2))  # mean, rstd
            qkv = gemm(3 * h)
            acts.append(qkv)
            tmp = t.alloc(small())
            att = t.alloc(h)  # flash attention output
            lse = t.alloc(batch * heads * seq * fp32)
            t.free(tmp)
            acts += [att, lse]
            proj = gemm(h)
            x_new = t.alloc(h)  # residual
            t.free(proj)
            acts.append(x)  # the block's input is saved
            x = x_new
            acts.append(t.alloc(h))  # ln2
            acts.append(t.alloc(tok * fp32 * 2))
            fc1 = gemm(4 * h)
            acts.append(fc1)
            acts.append(t.alloc(4 * h))  # gelu
            fc2 = gemm(h)
            x_new = t.alloc(h)
            t.free(fc2)
            acts.append(x)
            x = x_new
            if rng.random() < 0.3:
                t.free(t.alloc(small()))
            saved.append(acts)
        lnf = t.alloc(h)
        logits = gemm(tok * vocab * bf16)
        loss = t.alloc(4)
        probs = t.alloc(tok * vocab * fp32 // 2)  # softmax, kept as bf16
        t.free(probs)
        # backward: gradient of the logits, then the layers in reverse
        dlogits = t.alloc(tok * vocab * bf16)
        t.free(logits)
        t.free(loss)
        grads = {}
        grads["embed"] = t.alloc(vocab * d * fp32)
        dx = gemm(h)
        t.free(dlogits)
        t.free(lnf)
        t.free(x)
        grads["lnf"] = (t.alloc(d * fp32), t.alloc(d * fp32))
        for li in reversed(range(layers)):
            acts = saved.pop()
            lp = layer_params()
            layer_grads = []
            # consumed back to front; each consumer produces an input gradient
            # and its weight gradients
            for j, a in enumerate(reversed(acts)):
                if j % 3 == 0:
                    dtmp = gemm(4 * h if j in (3, 6) else h)
                    name, n = lp.pop() if lp else ("x", 0)
                    if n:
                        layer_grads.append(t.alloc(n * fp32))
                    t.free(dx)
                    dx = dtmp
                elif lp and rng.random() < 0.5:
                    name, n = lp.pop()
                    layer_grads.append(t.alloc(n * fp32))
                if rng.random() < 0.2:
                    t.free(t.alloc(small()))
                t.free(a)
            while lp:
                name, n = lp.pop()
                layer_grads.append(t.alloc(n * fp32))
            grads[li] = layer_grads
        t.free(dx)
        t.free(ids)
        grads["pos"] = t.alloc(2048 * d * fp32)
        # optimizer: grad-norm scalars, Adam's state at the first step, a foreach
        # temporary per weight, then zero_grad(set_to_none=True)
        norms = [t.alloc(small()) for _ in range(4)]
        if adam is None:
            adam = [(t.alloc(n * fp32), t.alloc(n * fp32)) for _, n in params]
        for _, n in params:
            t.free(t.alloc(n * fp32))
        for s in norms:
            t.free(s)
        for g in grads.values():
            if isinstance(g, (list, tuple)):
                for gi in g:
                    t.free(gi)
            else:
                t.free(g)
    for m, v in adam:
        t.free(m)
        t.free(v)
    for w in weights:
        t.free(w)


# ------------------------------------------------------------------ serving --

def gen_serving(t, rng, scale, length):
    d = max(64, int(round(2048 * scale / 64.0)) * 64)
    layers, vocab = 24, 32000
    max_batch = 48
    steps = max(10, int(round(6000 * length)))
    bf16 = 2
    kv_per_token = 2 * layers * d * bf16  # keys and values of every layer
    t.comment("serving: d=%d layers=%d kv/token=%d B, up to %d requests, %d steps"
              % (d, layers, kv_per_token, max_batch, steps))
    weights = [t.alloc(vocab * d * bf16)]
    for _ in range(layers):
        for n in (d, 3 * d * d, d * d, d, 4 * d * d, 4 * d * d):
            weights.append(t.alloc(n * bf16))
    weights.append(t.alloc(vocab * d * bf16))

    class Req:
        pass

    reqs = []

    def new_request():
        r = Req()
        r.prompt = int(math.exp(rng.uniform(math.log(32), math.log(2048))))
        r.out = 1 + int(rng.expovariate(1 / 200.0))
        r.len = 0
        r.cap = 0
        r.block = 16
        r.blocks = []
        return r

    def grow(r, tokens):
        r.len += tokens
        while r.cap < r.len:
            r.blocks.append(t.alloc(r.block * kv_per_token))
            r.cap += r.block
            r.block = min(r.block * 2, 1024)

    for _ in range(steps):
        # admissions: prefill with activations proportional to the prompt
        admit = 0
        while len(reqs) < max_batch and admit < 4 and rng.random() < 0.6:
            r = new_request()
            grow(r, r.prompt)
            acts = [t.alloc(r.prompt * d * bf16 * k) for k in (1, 3, 1, 4, 1)]
            logits = t.alloc(vocab * 4)
            for a in reversed(acts):
                t.free(a)
            t.free(logits)
            r.generated = 0
            reqs.append(r)
            admit += 1
        if not reqs:
            continue
        # one decode step for the whole batch
        n = len(reqs)
        tmp = [t.alloc(n * d * bf16 * k) for k in (1, 3, 1, 4)]
        if rng.random() < 0.5:
            t.free(t.alloc(rng.choice((4 * MIB, 8 * MIB))))
        logits = t.alloc(n * vocab * 4)
        for a in reversed(tmp):
            t.free(a)
        idx = t.alloc(n * 8)
        t.free(logits)
        t.free(idx)
        done = []
        for r in reqs:
            grow(r, 1)
            r.generated += 1
            if r.generated >= r.out or r.len >= 4096:
                done.append(r)
        # requests end in random order
        rng.shuffle(done)
        for r in done:
            for b in r.blocks:
                t.free(b)
            reqs.remove(r)
    for r in reqs:
        for b in r.blocks:
            t.free(b)
    for w in reversed(weights):
        t.free(w)


# ------------------------------------------------------------------- random --

def churn(t, rng, lo, hi, target, ops, pull):
    """`target` live blocks log-uniform in [lo, hi] bytes, then `ops` steps that
    allocate or free a random live block; `pull` is how hard the live count is
    drawn back to `target` (the allocation probability is 0.5 plus `pull` times
    the relative shortfall)."""
    llo, lhi = math.log(lo), math.log(hi)
    live = []

    def draw():
        return int(math.exp(rng.uniform(llo, lhi)))

    for _ in range(target):
        live.append(t.alloc(draw()))
    for _ in range(ops):
        p = 0.5 + pull * (target - len(live)) / target
        if rng.random() < p or len(live) < 2:
            live.append(t.alloc(draw()))
        else:
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            t.free(live.pop())


def gen_random(t, rng, scale, length):
    lo, hi = 256 * scale, 256 * MIB * scale
    target, ops = 256, max(100, int(round(100000 * length)))
    t.comment("random: log-uniform sizes in [%d, %d] bytes, about %d live, %d operations"
              % (lo, hi, target, ops))
    churn(t, rng, lo, hi, target, ops, pull=0.4)  # about 200-310 live, seeds 1-8


# --------------------------------------------------------------------- tiny --

def gen_tiny(t, rng, scale, length):
    lo, hi = 32 * scale, 16 * 1024 * scale
    target, ops = 20000, max(100, int(round(200000 * length)))
    t.comment("tiny: %d live blocks log-uniform in [%d, %d] bytes, %d operations"
              % (target, lo, hi, ops))
    churn(t, rng, lo, hi, target, ops, pull=2.0)


WORKLOADS = {
    "training": gen_training,
    "serving": gen_serving,
    "random": gen_random,
    "tiny": gen_tiny,
}


def positive(text):
    """argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text) from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError("%r is not a positive number" % text)
    return value


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for NAME.trace files")
    ap.add_argument("--only", action="append", choices=sorted(WORKLOADS),
                    help="generate only this workload (repeatable)")
    ap.add_argument("--seed", type=int, default=1, help="base seed (default 1)")
    ap.add_argument("--scale", type=positive, default=1.0,
                    help="multiplies byte sizes (default 1)")
    ap.add_argument("--ops", type=positive, default=1.0,
                    help="multiplies trace lengths (default 1)")
    args = ap.parse_args(argv)
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print("gen_traces.py: cannot make the folder %s: %s" % (args.out, e.strerror),
              file=sys.stderr)
        return 1
    for k, (name, fn) in enumerate(sorted(WORKLOADS.items())):
        if args.only and name not in args.only:
            continue
        path = os.path.join(args.out, name + ".trace")
        t = Trace(path)
        t.comment("generated by bench/gen_traces.py --seed %d --scale %g --ops %g"
                  % (args.seed, args.scale, args.ops))
        try:
            fn(t, random.Random(args.seed * 1000003 + k), args.scale, args.ops)
        except (TooLarge, OverflowError):  # OverflowError: a size of inf bytes
            print("gen_traces.py: --scale %g is too large for %s: its live bytes "
                  "would pass 2^63" % (args.scale, name), file=sys.stderr)
            return 2
        try:
            ops = t.write()
        except OSError as e:
            print("gen_traces.py: cannot write %s: %s" % (path, e.strerror), file=sys.stderr)
            return 1
        print("%s: %d operations" % (path, ops))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
