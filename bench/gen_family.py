#!/usr/bin/env python3
"""A broad, seeded family of allocation traces for judging placement rules (issue 22).

gen_traces.py's four workloads are the ones the arena was tuned on; a placement
rule tuned there need not hold elsewhere. This family varies what matters to a
placement - which sizes recur, how lifetimes nest, how holes form - across seven
kinds of work, each a generator with parameters, and each kind in many shapes (a
shape is one setting of the parameters):

  train    transformer training: width and depth, batch and sequence-length
           distributions, fp32 or bf16 activations with fp32 master weights and
           per-step bf16 weight copies, SGD / momentum / Adam (lazy or eager
           state), gradient accumulation over micro-batches, activation
           checkpointing, cuBLAS-like workspaces.
  serve    LLM serving with continuous batching: KV cache in fixed-size blocks
           (paged, allocated back to back per request), geometric blocks, or one
           contiguous reservation per request; prompt and output length
           distributions, batch limits, chunked or whole prefill temporaries.
  random   churn with sizes from log-uniform, uniform, bimodal, discrete or
           heavy-tailed distributions, and random, FIFO, LIFO or two-population
           lifetimes.
  tiny     small-block churn (32 B to 64 KiB) with varied ranges and live counts.
  conv     convolutional inference with image sizes and batch sizes that change
           from batch to batch, residual connections and convolution workspaces.
  moe      mixture-of-experts training whose expert activations are sized by the
           number of tokens the router sends to each expert, redrawn every step.
  adv      fragmentation adversaries: pinned blocks between freed ones, sizes that
           grow just past every hole, sawtooth phases, alternating size classes.

Every trace is deterministic for (shape, seed) on every machine and Python 3
version (only random.Random's integer and float draws are used) and ends with
every block freed. Shapes are named KIND-NN; `--list` prints them with their
parameters. --ops multiplies every trace's length.

    python3 bench/gen_family.py --out DIR --seeds 1-8              # the whole family
    python3 bench/gen_family.py --out DIR --only serve --seeds 1,2 --ops 0.1
"""

import argparse
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gen_traces import Trace  # noqa: E402  (the same writer as the four traces)

KIB = 1 << 10
MIB = 1 << 20
BF16, FP32 = 2, 4


def loguniform(rng, lo, hi):
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def small(rng):
    """A scalar, a reduction buffer, an index list: 4 B to 64 KiB."""
    return loguniform(rng, 4, 64 * KIB)


# ----------------------------------------------------------------- training --

def gen_train(t, rng, p, length):
    d, layers, vocab = p["d"], p["layers"], p.get("vocab", 32000)
    heads = max(1, d // 64)
    steps = max(2, int(round(p.get("steps", 6) * length)))
    micro = p.get("micro", 1)
    act = p.get("act", BF16)  # bytes per activation element
    copies = p.get("copies", False)  # bf16 copies of the fp32 weights every step
    opt = p.get("opt", "adam")
    ckpt = p.get("ckpt", False)
    ws = p.get("workspace", 0.5)

    def layer_params():
        return [d, d, 3 * d * d, 3 * d, d * d, d, d, d, 4 * d * d, 4 * d, 4 * d * d, d]

    params = [vocab * d, 2048 * d]
    for _ in range(layers):
        params += layer_params()
    params += [d, d]
    weights = [t.alloc(n * FP32) for n in params]
    nstate = {"sgd": 0, "momentum": 1, "adam": 2, "adam-eager": 2}[opt]
    state = []
    if opt == "adam-eager":
        state = [t.alloc(n * FP32) for n in params for _ in range(nstate)]

    def gemm(out_bytes):
        out = t.alloc(out_bytes)
        if rng.random() < ws:
            t.free(t.alloc(rng.choice((4 * MIB, 8 * MIB, 32 * MIB))))
        return out

    def draw_batch():
        kind, a, b = p["batch"]
        return a if kind == "fixed" else rng.randint(a, b)

    def draw_seq():
        kind = p["seq"][0]
        if kind == "fixed":
            return p["seq"][1]
        if kind == "uniform":
            return 64 * rng.randint(p["seq"][1] // 64, p["seq"][2] // 64)
        return rng.choice(p["seq"][1])  # buckets

    for step in range(steps):
        wcopies = [t.alloc(n * BF16) for n in params] if copies else []
        grads = None
        for mb in range(micro):
            batch, seq = draw_batch(), draw_seq()
            tok = batch * seq
            h = tok * d * act
            ids = t.alloc(tok * 8)
            x = t.alloc(h)
            saved = []
            for _ in range(layers):
                acts = []
                ln1 = t.alloc(h)
                stats = t.alloc(tok * FP32 * 2)
                qkv = gemm(3 * h)
                tmp = t.alloc(small(rng))
                att = t.alloc(h)
                lse = t.alloc(batch * heads * seq * FP32)
                t.free(tmp)
                proj = gemm(h)
                x1 = t.alloc(h)
                t.free(proj)
                ln2 = t.alloc(h)
                stats2 = t.alloc(tok * FP32 * 2)
                fc1 = gemm(4 * h)
                gelu = t.alloc(4 * h)
                fc2 = gemm(h)
                x2 = t.alloc(h)
                t.free(fc2)
                inner = [ln1, stats, qkv, att, lse, x1, ln2, stats2, fc1, gelu]
                if ckpt:  # only the block's input is kept; the rest is recomputed
                    for a in reversed(inner):
                        t.free(a)
                    acts = [x]
                else:
                    acts = [x] + inner
                x = x2
                saved.append(acts)
            logits = gemm(tok * vocab * BF16)
            probs = t.alloc(tok * vocab * FP32 // 2)
            t.free(probs)
            dlogits = t.alloc(tok * vocab * BF16)
            t.free(logits)
            first = grads is None
            if first:
                grads = [t.alloc(vocab * d * FP32)]
            dx = gemm(h)
            t.free(dlogits)
            t.free(x)
            for li in reversed(range(layers)):
                acts = saved.pop()
                if ckpt:  # recompute the block's activations, then consume them
                    acts = acts + [t.alloc(s) for s in (h, 3 * h, h, h, 4 * h, 4 * h)]
                lp = layer_params()
                for j, a in enumerate(reversed(acts)):
                    if j % 3 == 0:
                        dtmp = gemm(4 * h if j in (3, 6) else h)
                        if lp:
                            n = lp.pop()
                            if first:
                                grads.append(t.alloc(n * FP32))
                        t.free(dx)
                        dx = dtmp
                    if rng.random() < 0.2:
                        t.free(t.alloc(small(rng)))
                    t.free(a)
                while lp:
                    n = lp.pop()
                    if first:
                        grads.append(t.alloc(n * FP32))
            t.free(dx)
            t.free(ids)
        for c in wcopies:
            t.free(c)
        norms = [t.alloc(small(rng)) for _ in range(4)]
        if nstate and not state:
            state = [t.alloc(n * FP32) for n in params for _ in range(nstate)]
        for n in params:
            t.free(t.alloc(n * FP32))  # foreach temporary
        for s in norms:
            t.free(s)
        for g in grads:
            t.free(g)
    for s in state:
        t.free(s)
    for w in weights:
        t.free(w)


# ------------------------------------------------------------------ serving --

def gen_serve(t, rng, p, length):
    d, layers, vocab = p["d"], p["layers"], 32000
    max_batch = p.get("batch", 32)
    steps = max(10, int(round(p.get("steps", 600) * length)))
    wbytes = p.get("wbytes", BF16)  # 1: int8 weights
    kv_per_token = 2 * layers * d * BF16
    kv = p["kv"]  # ("fixed", tokens) | ("geometric", first, cap) | ("contiguous", max)
    plo, phi = p.get("prompt", (32, 2048))
    out_mean = p.get("out", 200)
    chunk = p.get("chunk", 0)  # chunked prefill: tokens per chunk; 0 = whole prompt
    admit_p = p.get("admit", 0.6)
    weights = [t.alloc(vocab * d * wbytes)]
    for _ in range(layers):
        for n in (d, 3 * d * d, d * d, d, 4 * d * d, 4 * d * d):
            weights.append(t.alloc(n * wbytes))
    weights.append(t.alloc(vocab * d * wbytes))

    class Req:
        pass

    reqs = []

    def grow(r, tokens):
        r.len += tokens
        while r.cap < r.len:
            if kv[0] == "fixed":
                r.blocks.append(t.alloc(kv[1] * kv_per_token))
                r.cap += kv[1]
            elif kv[0] == "geometric":
                r.blocks.append(t.alloc(r.block * kv_per_token))
                r.cap += r.block
                r.block = min(r.block * 2, kv[2])
            else:  # one reservation for the prompt and the longest output
                r.blocks.append(t.alloc(min(kv[1], r.prompt + r.out) * kv_per_token))
                r.cap = 1 << 62

    def prefill(tokens):
        acts = [t.alloc(tokens * d * BF16 * k) for k in (1, 3, 1, 4, 1)]
        logits = t.alloc(vocab * 4)
        for a in reversed(acts):
            t.free(a)
        t.free(logits)

    for _ in range(steps):
        admit = 0
        while len(reqs) < max_batch and admit < 4 and rng.random() < admit_p:
            r = Req()
            r.prompt = loguniform(rng, plo, phi)
            r.out = 1 + int(rng.expovariate(1.0 / out_mean))
            r.len = r.cap = 0
            r.block = kv[1]
            r.blocks = []
            r.generated = 0
            if chunk:
                left = r.prompt
                while left > 0:
                    c = min(chunk, left)
                    grow(r, c)
                    prefill(c)
                    left -= c
            else:
                grow(r, r.prompt)
                prefill(r.prompt)
            reqs.append(r)
            admit += 1
        if not reqs:
            continue
        n = len(reqs)
        tmp = [t.alloc(n * d * BF16 * k) for k in (1, 3, 1, 4)]
        if rng.random() < 0.5:
            t.free(t.alloc(rng.choice((4 * MIB, 8 * MIB))))
        logits = t.alloc(n * vocab * 4)
        for a in reversed(tmp):
            t.free(a)
        t.free(logits)
        done = []
        for r in reqs:
            grow(r, 1)
            r.generated += 1
            if r.generated >= r.out or r.len >= 4096:
                done.append(r)
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


# ------------------------------------------------------------ random / tiny --

def size_drawer(rng, dist):
    kind = dist[0]
    if kind == "log":
        lo, hi = dist[1], dist[2]
        return lambda: loguniform(rng, lo, hi)
    if kind == "uniform":
        lo, hi = dist[1], dist[2]
        return lambda: rng.randint(lo, hi)
    if kind == "bimodal":  # ("bimodal", (lo, hi), (lo, hi), p of the first)
        a, b, pa = dist[1], dist[2], dist[3]
        return lambda: loguniform(rng, *a) if rng.random() < pa else loguniform(rng, *b)
    if kind == "discrete":  # `count` sizes drawn once per trace, log-uniform
        sizes = [loguniform(rng, dist[2], dist[3]) for _ in range(dist[1])]
        return lambda: rng.choice(sizes)
    if kind == "pareto":  # heavy tail above lo, capped at hi
        lo, hi, alpha = dist[1], dist[2], dist[3]
        return lambda: int(min(hi, lo * rng.paretovariate(alpha)))
    raise ValueError(kind)


def gen_churn(t, rng, p, length):
    """`live` blocks, then `ops` steps that allocate or free; the victim is chosen
    by `order`: random, fifo (oldest), lifo (newest), or two populations (a share
    `long` of the blocks lives ten times longer)."""
    draw = size_drawer(rng, p["size"])
    target = p["live"]
    ops = max(100, int(round(p.get("ops", 8000) * length)))
    order = p.get("order", "random")
    pull = p.get("pull", 0.4)
    longs, live = [], []
    for _ in range(target):
        live.append(t.alloc(draw()))
    for _ in range(ops):
        n = len(live) + len(longs)
        if rng.random() < 0.5 + pull * (target - n) / target or n < 2:
            if order == "two" and rng.random() < p.get("long", 0.1):
                longs.append(t.alloc(draw()))
            else:
                live.append(t.alloc(draw()))
            continue
        if order == "two" and longs and (not live or rng.random() < 0.1):
            i = rng.randrange(len(longs))
            longs[i], longs[-1] = longs[-1], longs[i]
            t.free(longs.pop())
            continue
        if order == "fifo":
            t.free(live.pop(0))
        elif order == "lifo":
            t.free(live.pop())
        else:
            i = rng.randrange(len(live))
            live[i], live[-1] = live[-1], live[i]
            t.free(live.pop())


# --------------------------------------------------------------------- conv --

def gen_conv(t, rng, p, length):
    """A ResNet-like network run on batches whose image size and batch size change:
    stages of residual blocks, channels doubling and resolution halving per stage,
    each activation freed after its last consumer, a convolution workspace during
    a share of the convolutions."""
    widths, blocks = p["widths"], p["blocks"]
    batches = max(2, int(round(p.get("batches", 40) * length)))
    eb = p.get("bytes", 2)
    ws = p.get("workspace", 0.5)
    weights = []
    cin = 3
    for c in widths:
        for b in range(blocks):
            weights.append(t.alloc(9 * cin * c * eb))
            weights.append(t.alloc(9 * c * c * eb))
            cin = c
    weights.append(t.alloc(cin * 1000 * eb))

    def conv(shape, c):
        n, h, w = shape
        out = t.alloc(n * c * h * w * eb)
        if rng.random() < ws:  # the algorithm's workspace: some share of the output
            t.free(t.alloc(max(256, int(n * c * h * w * eb * rng.choice((0.25, 0.5, 1, 2))))))
        return out

    for _ in range(batches):
        kind = p["images"][0]
        if kind == "set":
            hw = rng.choice(p["images"][1])
            h, w = hw, hw
        else:  # ("range", lo, hi): multiples of 32, aspect ratio free
            h = 32 * rng.randint(p["images"][1] // 32, p["images"][2] // 32)
            w = 32 * rng.randint(p["images"][1] // 32, p["images"][2] // 32)
        n = rng.randint(*p["batch"])
        x = t.alloc(n * 3 * h * w * eb)
        h, w = max(1, h // 2), max(1, w // 2)
        y = conv((n, h, w), widths[0])
        t.free(x)
        x = y
        for si, c in enumerate(widths):
            for b in range(blocks):
                if si and b == 0:
                    h, w = max(1, h // 2), max(1, w // 2)
                a = conv((n, h, w), c)
                r = t.alloc(n * c * h * w * eb)  # batch norm + relu
                t.free(a)
                o = conv((n, h, w), c)
                t.free(r)
                s = t.alloc(n * c * h * w * eb)  # the residual sum
                t.free(o)
                t.free(x)
                x = s
        pooled = t.alloc(n * widths[-1] * eb)
        t.free(x)
        logits = t.alloc(n * 1000 * 4)
        t.free(pooled)
        if p.get("keep", 0) and rng.random() < p["keep"]:
            pass  # the results stay until the end (a pipeline's queue)
        else:
            t.free(logits)


# ---------------------------------------------------------------------- moe --

def gen_moe(t, rng, p, length):
    """Mixture-of-experts training: per layer an attention block of fixed shape,
    then a router that sends each token to `k` of `experts` experts with skewed,
    per-step weights; each expert's input, hidden and output activations are sized
    by its token count and kept for the backward pass; expert weight gradients are
    allocated as the backward pass reaches them."""
    d, layers, E, k = p["d"], p["layers"], p["experts"], p.get("k", 2)
    ffn = p.get("ffn", 4 * d)
    tok = p["tokens"]
    steps = max(2, int(round(p.get("steps", 6) * length)))
    skew = p.get("skew", 1.0)
    cap = p.get("capacity", 0)  # capacity factor; 0: dropless
    params = [(32000 * d)]
    for _ in range(layers):
        params += [4 * d * d, d * E] + [2 * d * ffn] * E
    weights = [t.alloc(n * FP32) for n in params]
    adam = []
    for step in range(steps):
        saved = []
        x = t.alloc(tok * d * BF16)
        for _ in range(layers):
            qkv = t.alloc(3 * tok * d * BF16)
            att = t.alloc(tok * d * BF16)
            x1 = t.alloc(tok * d * BF16)
            logits = t.alloc(tok * E * FP32)
            # skewed weights, redrawn each step: w_e = u^(skew * 4)
            w = [rng.random() ** (1 + 4 * skew) + 1e-3 for _ in range(E)]
            tot = sum(w)
            counts = [int(tok * k * wi / tot) for wi in w]
            if cap:
                limit = int(cap * tok * k / E)
                counts = [min(c, limit) for c in counts]
            disp = t.alloc(sum(counts) * d * BF16)  # all-to-all buffer
            ex = []
            for c in counts:
                if c == 0:
                    continue
                hin = t.alloc(c * d * BF16)
                hid = t.alloc(c * ffn * BF16)
                out = t.alloc(c * d * BF16)
                ex.append((hin, hid, out))
            comb = t.alloc(tok * d * BF16)
            t.free(disp)
            saved.append([x, qkv, att, x1, logits] + [b for e in ex for b in e])
            x = comb
        grads = []
        dx = t.alloc(tok * d * BF16)
        t.free(x)
        for acts in reversed(saved):
            for a in reversed(acts):
                if rng.random() < 0.3:
                    g = t.alloc(2 * d * ffn * FP32 if rng.random() < 0.7 else 4 * d * d * FP32)
                    grads.append(g)
                    nd = t.alloc(tok * d * BF16)
                    t.free(dx)
                    dx = nd
                t.free(a)
        t.free(dx)
        if not adam:
            adam = [t.alloc(n * FP32) for n in params for _ in range(2)]
        for g in grads:
            t.free(g)
    for a in adam:
        t.free(a)
    for w in weights:
        t.free(w)


# ------------------------------------------------------------------ adversary --

def gen_adv(t, rng, p, length):
    rounds = max(2, int(round(p.get("rounds", 30) * length)))
    mode = p["mode"]
    base = p.get("base", 1 * MIB)
    if mode == "pinned":
        # big blocks with a small pinned block after each; the big ones are
        # freed, then slightly larger requests cannot reuse any of those holes
        pins = []
        for r in range(rounds):
            n = rng.randint(8, 24)
            s = int(base * (1 + rng.random()))
            big = []
            for _ in range(n):
                big.append(t.alloc(s))
                pins.append(t.alloc(rng.randint(256, 64 * KIB)))
            for b in big:
                t.free(b)
            while len(pins) > 200:
                t.free(pins.pop(rng.randrange(len(pins))))
        for q in pins:
            t.free(q)
    elif mode == "growing":
        # each phase's size passes the last by a few percent; half of each phase
        # stays live into the next, so every hole is just too small
        live = []
        s = base
        for r in range(rounds):
            s = int(s * (1 + rng.uniform(0.02, 0.15)))
            if s > 64 * base:
                s = base
            cur = [t.alloc(s) for _ in range(rng.randint(6, 16))]
            for i, c in enumerate(cur):
                if i % 2:
                    t.free(c)
                else:
                    live.append(c)
            while len(live) > 40:
                t.free(live.pop(rng.randrange(len(live))))
        for c in live:
            t.free(c)
    elif mode == "sawtooth":
        # sizes ramp up then fall back; blocks die after a random number of phases
        live = []
        for r in range(rounds):
            for j in range(rng.randint(10, 30)):
                s = int(base * (1 + j * 0.1) * rng.uniform(0.9, 1.1))
                live.append((r + rng.randint(1, 4), t.alloc(s)))
            keep = []
            for die, b in live:
                if die <= r:
                    t.free(b)
                else:
                    keep.append((die, b))
            live = keep
        for _, b in live:
            t.free(b)
    elif mode == "alternate":
        # two size classes that alternate in phases: the holes one phase leaves
        # are a little too small or much too large for the next
        live = []
        a, b = base, int(base * p.get("ratio", 1.7))
        for r in range(rounds):
            s = a if r % 2 else b
            for _ in range(rng.randint(10, 40)):
                live.append(t.alloc(int(s * rng.uniform(0.97, 1.03))))
            rng.shuffle(live)
            for _ in range(len(live) // 2):
                t.free(live.pop())
        for c in live:
            t.free(c)
    else:
        raise ValueError(mode)


# ------------------------------------------------------------------- shapes --

def _shapes():
    s = {}
    tr = [  # train: width, depth, batch and sequence, precision, optimizer, ...
        dict(d=512, layers=6, batch=("fixed", 16, 16), seq=("uniform", 128, 1024)),
        dict(d=1024, layers=12, batch=("fixed", 8, 8), seq=("uniform", 256, 2048)),
        dict(d=768, layers=12, batch=("range", 4, 16), seq=("fixed", 512)),
        dict(d=2048, layers=8, batch=("fixed", 4, 4), seq=("buckets", [512, 1024, 2048])),
        dict(d=1024, layers=24, batch=("fixed", 8, 8), seq=("uniform", 256, 1024), ckpt=True,
             steps=4),
        dict(d=1536, layers=12, batch=("range", 2, 8), seq=("uniform", 512, 2048),
             copies=True),
        dict(d=512, layers=8, batch=("fixed", 32, 32), seq=("fixed", 256), act=FP32,
             opt="momentum"),
        dict(d=1024, layers=12, batch=("fixed", 8, 8), seq=("uniform", 128, 2048),
             micro=4, steps=3),
        dict(d=768, layers=16, batch=("range", 8, 24), seq=("buckets", [128, 256, 512]),
             opt="sgd"),
        dict(d=2560, layers=6, batch=("fixed", 2, 2), seq=("uniform", 1024, 4096),
             opt="adam-eager", workspace=0.9),
        dict(d=1024, layers=12, batch=("range", 1, 16), seq=("uniform", 64, 4096),
             copies=True, micro=2, steps=4),
        dict(d=640, layers=20, batch=("fixed", 12, 12), seq=("uniform", 256, 1536),
             ckpt=True, opt="momentum", workspace=0.1),
    ]
    sv = [  # serve: KV scheme, prompt and output lengths, batch, prefill
        dict(d=2048, layers=24, kv=("fixed", 16)),
        dict(d=4096, layers=32, kv=("fixed", 16), batch=64, prompt=(256, 4096),
             steps=250),
        dict(d=2048, layers=24, kv=("geometric", 16, 1024)),
        dict(d=1024, layers=16, kv=("contiguous", 4096), batch=48, out=300),
        dict(d=2048, layers=24, kv=("fixed", 32), chunk=512),
        dict(d=3072, layers=28, kv=("fixed", 8), prompt=(16, 512), out=500, batch=96,
             steps=250),
        dict(d=2048, layers=24, kv=("geometric", 32, 512), prompt=(512, 4096), out=80),
        dict(d=1536, layers=20, kv=("contiguous", 2048), prompt=(32, 1024), admit=0.3),
        dict(d=4096, layers=32, kv=("fixed", 16), wbytes=1, chunk=1024, out=120,
             steps=350),
        dict(d=2048, layers=24, kv=("fixed", 64), prompt=(64, 8192), batch=16),
        dict(d=1024, layers=24, kv=("geometric", 16, 256), batch=128, out=60, admit=0.9,
             steps=200),
        dict(d=2560, layers=32, kv=("fixed", 16), prompt=(1024, 2048), out=400,
             batch=24, admit=0.4, steps=350),
    ]
    rd = [  # random: size distribution, live count, lifetime order
        dict(size=("log", 256, 256 * MIB), live=256),
        dict(size=("log", 4 * KIB, 64 * MIB), live=512),
        dict(size=("uniform", 1 * MIB, 64 * MIB), live=128),
        dict(size=("bimodal", (256, 64 * KIB), (16 * MIB, 512 * MIB), 0.8), live=300),
        dict(size=("discrete", 12, 64 * KIB, 256 * MIB), live=256),
        dict(size=("pareto", 1 * MIB, 1024 * MIB, 1.2), live=200),
        dict(size=("log", 256, 256 * MIB), live=256, order="fifo"),
        dict(size=("log", 64 * KIB, 128 * MIB), live=256, order="lifo"),
        dict(size=("log", 256, 256 * MIB), live=300, order="two", long=0.1),
        dict(size=("discrete", 4, 1 * MIB, 64 * MIB), live=400, order="two", long=0.3),
        dict(size=("log", 1 * MIB, 16 * MIB), live=64, pull=1.0),
        dict(size=("bimodal", (1 * MIB, 4 * MIB), (8 * MIB, 256 * MIB), 0.5), live=200,
             order="fifo"),
    ]
    ty = [  # tiny: small sizes, live counts, orders
        dict(size=("log", 32, 16 * KIB), live=2000),
        dict(size=("log", 256, 4 * KIB), live=3000),
        dict(size=("uniform", 32, 2048), live=2000),
        dict(size=("discrete", 8, 32, 16 * KIB), live=2000),
        dict(size=("log", 32, 64 * KIB), live=1000, order="fifo"),
        dict(size=("log", 32, 16 * KIB), live=2000, order="lifo"),
        dict(size=("bimodal", (32, 512), (8 * KIB, 64 * KIB), 0.9), live=2000),
        dict(size=("pareto", 64, 64 * KIB, 1.1), live=2000),
        dict(size=("log", 32, 16 * KIB), live=2000, order="two", long=0.2),
        dict(size=("discrete", 3, 256, 8 * KIB), live=3000, order="two", long=0.05),
        dict(size=("log", 1 * KIB, 32 * KIB), live=500, pull=1.5),
        dict(size=("uniform", 4 * KIB, 64 * KIB), live=800, order="fifo"),
    ]
    cv = [  # conv: widths, depth, image sizes, batches
        dict(widths=[64, 128, 256, 512], blocks=2, images=("set", [224, 256, 320]),
             batch=(8, 32)),
        dict(widths=[64, 128, 256, 512], blocks=3, images=("range", 192, 640),
             batch=(1, 8)),
        dict(widths=[32, 64, 128, 256], blocks=2, images=("range", 320, 1024),
             batch=(1, 4), bytes=4),
        dict(widths=[96, 192, 384, 768], blocks=2, images=("set", [384, 512, 640, 800]),
             batch=(2, 16), workspace=0.9),
        dict(widths=[64, 128, 256, 512, 1024], blocks=1, images=("range", 128, 512),
             batch=(16, 64), keep=0.2),
        dict(widths=[48, 96, 192], blocks=4, images=("set", [256, 512, 1024]),
             batch=(1, 2), workspace=0.2),
    ]
    mo = [  # moe: experts, top-k, skew, capacity
        dict(d=1024, layers=6, experts=8, k=2, tokens=8192),
        dict(d=768, layers=8, experts=16, k=2, tokens=4096, skew=2.0),
        dict(d=1024, layers=4, experts=32, k=1, tokens=16384, skew=0.5),
        dict(d=2048, layers=4, experts=8, k=2, tokens=4096, capacity=1.25),
        dict(d=512, layers=12, experts=64, k=4, tokens=8192, ffn=1024, steps=2),
        dict(d=1536, layers=4, experts=16, k=2, tokens=8192, skew=3.0, capacity=2.0),
    ]
    ad = [  # adversaries
        dict(mode="pinned", base=4 * MIB),
        dict(mode="growing", base=2 * MIB),
        dict(mode="sawtooth", base=8 * MIB),
        dict(mode="alternate", base=4 * MIB, ratio=1.7),
        dict(mode="alternate", base=1 * MIB, ratio=2.3, rounds=60),
        dict(mode="pinned", base=64 * KIB, rounds=80),
    ]
    for kind, gen, lst in (("train", gen_train, tr), ("serve", gen_serve, sv),
                           ("random", gen_churn, rd), ("tiny", gen_churn, ty),
                           ("conv", gen_conv, cv), ("moe", gen_moe, mo),
                           ("adv", gen_adv, ad)):
        for i, params in enumerate(lst, 1):
            s["%s-%02d" % (kind, i)] = (gen, params)
    return s


SHAPES = _shapes()
KINDS = ["train", "serve", "random", "tiny", "conv", "moe", "adv"]


def parse_seeds(text):
    """"1-8", "1,3,5", "2": a sorted list of distinct positive seeds."""
    seeds = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                lo, hi = int(lo), int(hi)
                if lo > hi:
                    raise ValueError
                seeds.update(range(lo, hi + 1))
            else:
                seeds.add(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a list of seeds (1-8, 1,3,5)" % text) from None
    if not seeds or min(seeds) < 1:
        raise argparse.ArgumentTypeError("%r: seeds are whole numbers from 1" % text)
    return sorted(seeds)


def positive(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text) from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError("%r is not a positive number" % text)
    return value


def selected(only):
    """The shape names that --only picks (a kind or a shape name each), in order."""
    names = list(SHAPES)
    if not only:
        return names
    out = []
    for name in names:
        if name in only or name.split("-")[0] in only:
            out.append(name)
    return out


def generate(path, shape, seed, ops):
    gen, params = SHAPES[shape]
    t = Trace(path)
    t.comment("generated by bench/gen_family.py: %s seed %d --ops %g" % (shape, seed, ops))
    t.comment("%s %r" % (shape, params))
    # the seed and the shape's name both pick the stream: no two traces share one
    key = sum((i + 1) * ord(c) for i, c in enumerate(shape))
    gen(t, random.Random(seed * 1000003 + key), params, ops)
    return t.write()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="folder for SHAPE.sSEED.trace files")
    ap.add_argument("--only", action="append", metavar="KIND|SHAPE",
                    help="only this kind (train, serve, ...) or shape (repeatable)")
    ap.add_argument("--seeds", type=parse_seeds, default=[1], help="e.g. 1-8 (default 1)")
    ap.add_argument("--ops", type=positive, default=1.0,
                    help="multiplies trace lengths (default 1)")
    ap.add_argument("--list", action="store_true", help="print the shapes and stop")
    args = ap.parse_args(argv)
    for o in args.only or []:
        if o not in KINDS and o not in SHAPES:
            ap.error("--only %r is neither a kind (%s) nor a shape" % (o, ", ".join(KINDS)))
    if args.list:
        for name in selected(args.only):
            print("%s\t%r" % (name, SHAPES[name][1]))
        return 0
    if not args.out:
        ap.error("--out is required")
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        print("gen_family.py: cannot make the folder %s: %s" % (args.out, e.strerror),
              file=sys.stderr)
        return 1
    for name in selected(args.only):
        for seed in args.seeds:
            path = os.path.join(args.out, "%s.s%d.trace" % (name, seed))
            try:
                ops = generate(path, name, seed, args.ops)
            except OSError as e:
                print("gen_family.py: cannot write %s: %s" % (path, e.strerror),
                      file=sys.stderr)
                return 1
            print("%s: %d operations" % (path, ops))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
