#!/usr/bin/env python3
"""The real-GPU table of bench/run_cuda.sh, from its JSON lines.

    python3 bench/cuda_table.py --traces DIR RESULTS.jsonl

RESULTS.jsonl holds one line per (trace, allocator) with gpumem-replay's keys
(trace, allocator, ops, ns_per_op, peak_reserved_bytes, failures), from
gpumem-replay, gpumem-cuda-baselines and torch_replay.py alike. Every row's peak
reserved is divided by one denominator per trace, its peak of raw requested bytes,
computed here from DIR/TRACE.trace (not each producer's peak_live_bytes:
gpumem-replay's is rounded to 256 bytes per request). Prints a Markdown table,
allocators in a fixed order, traces in the order first seen; gpumem's rows (those
with gpumem-replay's driver figures) have their CUDA driver calls per 1,000
operations. Then the driver's price on this GPU, so that every GPU run measures
it: per gpumem row, the nanoseconds per call of each entry point it called, as
gpumem measured them around each call (gpumem_list_driver_calls), and last the
price list's (tests/fakecuda/driver_prices.h) for calls of the same sizes.
Standard library only.
"""

import argparse
import json
import os
import sys

# run_cuda.sh's labels, in the table's order; others follow in the order seen
ORDER = ["gpumem-growth", "gpumem-growth-no-trim", "gpumem-growth-async", "cudaMalloc",
         "cudaMallocAsync", "torch", "torch-expandable"]


def raw_peak_live(path):
    """The peak of the sum of live raw requested bytes of a trace file."""
    live, cur, peak = {}, 0, 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            t = line.split()
            if not t or t[0].startswith("#"):
                continue
            if t[0] == "a" and len(t) >= 3:
                size = int(t[2])
                live[t[1]] = size
                cur += size
                peak = max(peak, cur)
            elif t[0] == "f" and len(t) >= 2 and t[1] in live:
                cur -= live.pop(t[1])
            else:
                raise ValueError(f"{path}:{n}: bad line")
    return peak


def load(lines):
    """The result rows of JSON lines (blank lines skipped)."""
    rows = []
    for n, line in enumerate(lines, 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"line {n}: not JSON: {e}") from None
    return rows


def table(rows, peaks):
    """Markdown lines: per trace and allocator, ns/op and peak reserved / peak live.
    peaks: trace -> raw peak live bytes."""
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    allocs = list(dict.fromkeys(r["allocator"] for r in rows))
    allocs = [a for a in ORDER if a in allocs] + [a for a in allocs if a not in ORDER]
    by = {(r["trace"], r["allocator"]): r for r in rows}
    devices = sorted({r["device"] for r in rows if r.get("device")})
    out = []
    if devices:
        out.append("Device: " + ", ".join(devices) + ".")
        out.append("")
    out.append("| trace | allocator | ns/op | peak reserved / peak live | failures | "
               "calls / 1,000 ops |")
    out.append("|---|---|---:|---:|---:|---:|")
    for t in traces:
        if t not in peaks:
            raise ValueError(f"no trace file for '{t}'")
        for a in allocs:
            r = by.get((t, a))
            if r is None:
                continue
            ns = r.get("ns_per_op")
            ns_s = "-" if ns is None else f"{ns:.1f}"
            res = r.get("peak_reserved_bytes")
            ratio = "-" if not res or not peaks[t] else f"{res / peaks[t]:.3f}"
            calls = r.get("driver_calls_per_1000_ops")
            calls_s = "-" if calls is None else f"{calls:.1f}"
            out.append(f"| {t} | {a} | {ns_s} | {ratio} | {r.get('failures', 0)} | "
                       f"{calls_s} |")
    out.append("")
    out.append("Peak live (raw requested bytes, the denominator): " + ", ".join(
        f"{t} {peaks[t] / 2**30:.3f} GiB" for t in traces) + ".")
    return out + driver_table(rows, traces, allocs)


def driver_table(rows, traces, allocs):
    """Markdown lines: the driver's price as measured, ns per call of each entry
    point called, per gpumem row (in the main table's order), and the price list's
    ns per call for calls of the sizes made (all rows together); [] when no row
    has driver figures."""
    by = {(r["trace"], r["allocator"]): r for r in rows if r.get("driver_calls")}
    if not by:
        return []
    kinds = []  # every row lists every entry point, in gpumem's order
    for r in by.values():
        kinds += [k for k, c in r["driver_calls"].items() if c["calls"] and k not in kinds]
    order = list(next(iter(by.values()))["driver_calls"])
    kinds.sort(key=lambda k: order.index(k) if k in order else len(order))
    out = ["", "The driver's price on this GPU: ns per call, measured around each call "
           "(gpumem_list_driver_calls), in the timed replays of gpumem's rows; the last "
           "line is the price list's for calls of the same sizes "
           "(tests/fakecuda/driver_prices.h).", "",
           "| trace | allocator | " + " | ".join(kinds) + " |",
           "|---|---|" + "---:|" * len(kinds)]
    total = {k: [0, 0.0] for k in kinds}  # calls, list price
    for t in traces:
        for a in allocs:
            r = by.get((t, a))
            if r is None:
                continue
            cells = []
            for k in kinds:
                c = r["driver_calls"].get(k, {"calls": 0})
                if c["calls"]:
                    total[k][0] += c["calls"]
                    total[k][1] += c["price_ns"]
                cells.append(f"{c['ns'] / c['calls']:.0f}" if c["calls"] else "-")
            out.append(f"| {t} | {a} | " + " | ".join(cells) + " |")
    out.append("| price list | | " + " | ".join(
        f"{total[k][1] / total[k][0]:.0f}" if total[k][0] else "-" for k in kinds) + " |")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True, help="folder of TRACE.trace files")
    ap.add_argument("results", help="JSON lines")
    args = ap.parse_args(argv)
    try:
        with open(args.results) as f:
            rows = load(f)
        peaks = {}
        for t in dict.fromkeys(r["trace"] for r in rows):
            p = os.path.join(args.traces, t + ".trace")
            if os.path.exists(p):
                peaks[t] = raw_peak_live(p)
        print("\n".join(table(rows, peaks)))
    except (OSError, ValueError, KeyError) as e:
        print(f"cuda_table.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
