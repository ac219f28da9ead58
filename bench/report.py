#!/usr/bin/env python3
"""Turns bench/run_all.sh's JSON lines into the results section of docs/bench.md
and, when a second file is named, the summary table of the README.

    python3 bench/report.py RESULTS.jsonl docs/bench.md [README.md]

Only the text between the markers `<!-- results:begin -->` and
`<!-- results:end -->` (docs/bench.md) or `<!-- bench:begin -->` and
`<!-- bench:end -->` (README.md) is replaced; the rest of each file is prose kept
by hand. Standard library only."""

import json
import statistics
import sys

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
README_BEGIN = "<!-- bench:begin -->"
README_END = "<!-- bench:end -->"
WORKLOADS = ["training", "serving", "random", "tiny"]
ALLOCATORS = ["arena", "api", "first-fit", "tlsf", "malloc", "clairvoyant"]

# issue 5's goals: (instructions per op, VMA's ns/op, min capacity factor)
GOALS = {
    "training": (200, 50, 1.002),
    "serving": (200, 50, 1.012),
    "random": (200, 85, 1.13),
    "tiny": (250, 190, 1.03),
}


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def instr_per_op(r):
    ir = r.get("callgrind_ir")
    return None if ir is None else ir / r["ops"]


def figures(r):
    """A run's three figures as table cells: ns/op, instr/op, min capacity factor."""
    return "%s | %s | %s" % (fmt(r["ns_per_op"], ".1f"), fmt(instr_per_op(r), ".0f"),
                             fmt(r["min_capacity_factor"], ".4f"))


def seed_factors(seeds, runs, w, a):
    """The minimum capacity factors of (w, a) over every seed, seed 1's from runs."""
    per = dict(seeds.get((w, a), {}))
    main = runs.get((w, a))
    if not per or not main:
        return []
    per[1] = main["min_capacity_factor"]
    return [x for x in per.values() if x is not None]


def load(path):
    """run_all.sh's JSON lines. A run's "round" lines (more timed runs of the same
    allocator on the same trace, alternating with another's) make its ns/op the
    median over all its runs; "rounds" then says how many."""
    runs, scaling, pools, machine, seeds, rounds = {}, [], [], {}, {}, {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            kind = o.get("kind")
            if kind == "machine":
                machine = o
            elif kind == "live_chunks":
                scaling.append(o)
            elif kind == "pool_creation":
                pools.append(o)
            elif kind == "seed":
                seeds.setdefault((o["trace"], o["allocator"]), {})[o["seed"]] = \
                    o["min_capacity_factor"]
            elif kind == "round":
                rounds.setdefault((o["trace"], o["allocator"]), []).append(o["ns_per_op"])
            else:
                runs[(o["trace"], o["allocator"])] = o
    for key, more in rounds.items():
        r = runs.get(key)
        more = [x for x in more if x is not None]  # null: a round without a timing
        if r and r["ns_per_op"] is not None and more:
            r["ns_per_op"] = statistics.median([r["ns_per_op"]] + more)
            r["rounds"] = 1 + len(more)
    return runs, scaling, pools, machine, seeds


def verdict(ok, failures=0):
    """A goal's status; a run with failed allocations (at twice the peak, or in
    growth mode up to twice the peak) meets no goal, whatever its figure."""
    if failures:
        return "**not met** (%d failed allocation%s)" % (failures,
                                                        "" if failures == 1 else "s")
    return "**met**" if ok else "**not met**"


def rounds_note(runs):
    """How the allocators timed in rounds were timed, for a caption ('' if none)."""
    timed = sorted({(r["rounds"], r["allocator"]) for r in runs.values() if "rounds" in r},
                   key=lambda x: ALLOCATORS.index(x[1]) if x[1] in ALLOCATORS else 99)
    if not timed:
        return ""
    return ("; %s: the median of %d such runs, taken alternately, so that a slow spell "
            "of a shared machine does not decide their ratio"
            % (" and ".join(a for _, a in timed), max(n for n, _ in timed)))


def fmt_opt(o, key):
    """A figure of a run that older JSON lines may lack."""
    return "%.1f" % o[key] if key in o else "–"


def render(runs, scaling, pools, machine, seeds):
    out = []
    out.append("Commit `%s`, %s; %s, %s CPUs (`nproc`); compiler %s; %s."
               % (machine.get("revision", "?"), machine.get("date", "?"),
                  machine.get("cpu", "?"), machine.get("nproc", "?"),
                  machine.get("compiler", "?"), machine.get("valgrind", "?")))
    any_run = next(iter(runs.values()), {})
    out.append("Build type `%s`%s; each ns/op is the median of %s timed replays after "
               "one untimed replay on the same instance%s."
               % (any_run.get("build_type", "?"),
                  "" if any_run.get("optimized", True) else " (NOT OPTIMIZED)",
                  any_run.get("repeat", "?"), rounds_note(runs)))
    out.append("")
    out.append("| workload | ops | peak live | allocator | ns/op | instr/op | min capacity factor |")
    out.append("|---|---:|---:|---|---:|---:|---:|")
    for w in WORKLOADS:
        for a in ALLOCATORS:
            r = runs.get((w, a))
            if not r:
                continue
            out.append("| %s | %d | %.1f MiB | %s | %s |" % (
                w, r["ops"], r["peak_live_bytes"] / 2**20, a, figures(r)))
    out.append("")
    out.append("Growth mode (`api --growth`, limit twice the peak live bytes): peak "
               "reserved against peak live.")
    out.append("")
    out.append("| workload | peak live | peak reserved | reserved / live | ns/op | failures |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for w in WORKLOADS:
        r = runs.get((w, "api-growth"))
        if not r:
            continue
        out.append("| %s | %.1f MiB | %.1f MiB | %.4f | %s | %d |" % (
            w, r["peak_live_bytes"] / 2**20, r["peak_reserved_bytes"] / 2**20,
            r["peak_reserved_bytes"] / r["peak_live_bytes"], fmt(r["ns_per_op"], ".1f"),
            r["failures"]))
    out.append("")
    if seeds:
        out.append("Minimum capacity factor over seeds (the same generator, seed 1 as "
                   "above): mean, lowest and highest.")
        out.append("")
        out.append("| workload | allocator | seeds | mean | lowest | highest |")
        out.append("|---|---|---:|---:|---:|---:|")
        for w in WORKLOADS:
            for a in ALLOCATORS:
                v = seed_factors(seeds, runs, w, a)
                if not v:
                    continue
                out.append("| %s | %s | %d | %.4f | %.4f | %.4f |" % (
                    w, a, len(v), sum(v) / len(v), min(v), max(v)))
        out.append("")
    out.append("Scaling (`gpumem-scaling`): the arena with N live chunks of 256 B-16 KiB "
               "among free holes; each operation frees a live chunk and allocates a "
               "random size in its place, the chunk chosen among the 1,000 allocated "
               "last (recent) or among all N (random). The tlsf baseline runs the same "
               "sizes and victims (LIFO lists: no tree, no search), so its growth is "
               "the memory system's share alone. Metadata is the arena's. A load is "
               "the memory system itself: ns per load when each load's address comes "
               "from the one before, over a buffer as large as the arena's metadata "
               "(what a free waits for, at the least, to find a victim's record among "
               "N at random).")
    out.append("")
    out.append("| live chunks | free chunks | ns/op recent | ns/op random | tlsf recent | tlsf random | ns per load | metadata | bytes / live chunk | bytes / chunk |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in scaling:
        out.append("| %d | %d | %.1f | %.1f | %s | %s | %s | %.1f MiB | %.1f | %.1f |" % (
            s["live_chunks"], s["free_chunks"], s["ns_per_op_recent"],
            s["ns_per_op_random"], fmt_opt(s, "tlsf_ns_per_op_recent"),
            fmt_opt(s, "tlsf_ns_per_op_random"), fmt_opt(s, "dependent_load_ns"),
            s["metadata_bytes"] / 2**20,
            s["metadata_per_live_chunk"], s["metadata_per_chunk"]))
    out.append("")
    out.append("| pool | arena: create + add_region | arena metadata | api: runtime_create + initialize (sim) |")
    out.append("|---|---:|---:|---:|")
    for p in pools:
        out.append("| %s | %.2f µs | %d B | %.1f µs |" % (
            p["pool"], p["arena_us"], p["arena_metadata_bytes"], p["api_us"]))
    out.append("")

    # where each goal stands, computed from the figures above
    out.append("### Goals")
    out.append("")
    out.append("| goal | figure | status |")
    out.append("|---|---|---|")
    for w in WORKLOADS:
        r = runs.get((w, "arena"))
        if not r:
            continue
        gi, gns, gf = GOALS[w]
        ipo = instr_per_op(r)
        failed = r.get("failures", 0)
        if ipo is not None:
            out.append("| instr/op ≤ %d on %s | %.0f | %s |" % (
                gi, w, ipo, verdict(ipo <= gi, failed)))
        if r["ns_per_op"] is not None:  # null: run_all.sh with REPEAT=0
            out.append("| ns/op ≤ %d (VMA) on %s | %.1f | %s |" % (
                gns, w, r["ns_per_op"], verdict(r["ns_per_op"] <= gns, failed)))
        f = r["min_capacity_factor"]
        if f is None:
            out.append("| min capacity factor ≤ %g on %s | none up to 64× | %s |" % (
                gf, w, verdict(False)))
        else:
            v = seed_factors(seeds, runs, w, "arena")
            spread = "" if len(v) < 2 else "; over %d seeds mean %.4f, %.4f-%.4f" % (
                len(v), sum(v) / len(v), min(v), max(v))
            c = runs.get((w, "clairvoyant"))
            if c and c["min_capacity_factor"] is not None:
                cv = seed_factors(seeds, runs, w, "clairvoyant")
                spread += " (knowing every lifetime: %.4f%s)" % (
                    c["min_capacity_factor"],
                    "" if len(cv) < 2 else ", mean %.4f" % (sum(cv) / len(cv)))
            out.append("| min capacity factor ≤ %g on %s | %.4f%s | %s |" % (
                gf, w, f, spread, verdict(f <= gf)))
    if scaling:
        first, last = scaling[0], scaling[-1]
        # the goal is about a million live chunks: a --quick run stops at 10,000
        for pat in ("recent", "random") if last["live_chunks"] >= 1000000 else ():
            key = "ns_per_op_" + pat
            ratio = last[key] / first[key]
            tkey = "tlsf_" + key
            floor = ""
            if tkey in last and tkey in first:
                floor = " (tlsf, no tree: %.2f×)" % (last[tkey] / first[tkey])
            load = "dependent_load_ns"
            if pat == "random" and load in last and load in first:
                # a free of a victim chosen at random among N loads its record at
                # least once: half the operations wait for one load from memory
                wait = (last[load] - first[load]) / 2
                floor += ("; a load from memory costs %.0f ns at %d chunks, so a free "
                          "of a victim chosen at random waits %.0f ns more than at %d "
                          "(%.0f per operation), where the goal leaves %.1f" % (
                              last[load], last["live_chunks"], 2 * wait,
                              first["live_chunks"], wait, first[key]))
                if wait > first[key]:
                    floor += ": out of reach on this machine"
            out.append("| ns/op at %d live ≤ 2× at %d (%s) | %.1f / %.1f = %.2f×%s | %s |" % (
                last["live_chunks"], first["live_chunks"], pat, last[key], first[key],
                ratio, floor, verdict(ratio <= 2)))
        worst = max(s["metadata_per_chunk"] for s in scaling)
        worst_live = max(s["metadata_per_live_chunk"] for s in scaling)
        out.append("| metadata ≤ 128 B per chunk | at most %.1f B per chunk (%.1f B per live chunk) | %s |"
                   % (worst, worst_live, verdict(worst <= 128)))
    for p in pools:
        if p["pool"] == "80GiB":
            out.append("| 80 GiB pool created in < 50 µs | arena %.2f µs; whole api path %.1f µs | %s |"
                       % (p["arena_us"], p["api_us"], verdict(p["arena_us"] < 50)))
    for w in WORKLOADS:
        r, q = runs.get((w, "arena")), runs.get((w, "api"))
        if r and q and r["ns_per_op"] is not None and q["ns_per_op"] is not None:
            ratio = q["ns_per_op"] / r["ns_per_op"]
            out.append("| api within 1.5× of arena on %s | %.1f / %.1f = %.2f× | %s |" % (
                w, q["ns_per_op"], r["ns_per_op"], ratio,
                verdict(ratio <= 1.5, r.get("failures", 0) + q.get("failures", 0))))
    g = runs.get(("training", "api-growth"))
    if g:
        ratio = g["peak_reserved_bytes"] / g["peak_live_bytes"]
        out.append("| growth: peak reserved ≤ 1.10× peak live on training | %.4f× | %s |"
                   % (ratio, verdict(ratio <= 1.10, g.get("failures", 0))))
    out.append("")
    return "\n".join(out)


def render_summary(runs, machine, seeds):
    """The README's table: every allocator on every workload, one row each."""
    any_run = next(iter(runs.values()), {})
    out = ["Commit `%s`, %s; %s, %s CPUs; %s; build type `%s`; ns/op is the median of "
           "%s warm replays%s; instr/op is callgrind's count for one warm replay."
           % (machine.get("revision", "?"), machine.get("date", "?"),
              machine.get("cpu", "?"), machine.get("nproc", "?"),
              machine.get("compiler", "?"), any_run.get("build_type", "?"),
              any_run.get("repeat", "?"), rounds_note(runs)), ""]
    n = max((len(seed_factors(seeds, runs, w, a)) for w in WORKLOADS for a in ALLOCATORS),
            default=0)
    out.append("| workload | allocator | ns/op | instr/op | min capacity factor | "
               "its mean over %d seeds |" % n)
    out.append("|---|---|---:|---:|---:|---:|")
    for w in WORKLOADS:
        for a in ALLOCATORS:
            r = runs.get((w, a))
            if not r:
                continue
            v = seed_factors(seeds, runs, w, a)
            out.append("| %s | %s | %s | %s |" % (
                w, a, figures(r), fmt(sum(v) / len(v) if v else None, ".4f")))
    growth = [(w, runs.get((w, "api-growth"))) for w in WORKLOADS]
    growth = ["%s %.3f" % (w, r["peak_reserved_bytes"] / r["peak_live_bytes"])
              for w, r in growth if r]
    if growth:
        out.append("")
        out.append("Growth mode, peak reserved / peak live: " + ", ".join(growth) + ".")
    return "\n".join(out)


def replace_between(path, begin, end, section, default_head):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        text = default_head
    if begin not in text or end not in text:
        text += "\n%s\n%s\n" % (begin, end)
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + begin + "\n" + section + "\n" + end + tail)


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    runs, scaling, pools, machine, seeds = load(argv[0])
    replace_between(argv[1], BEGIN, END, render(runs, scaling, pools, machine, seeds),
                    "# gpumem bench results\n")
    if len(argv) == 3:
        replace_between(argv[2], README_BEGIN, README_END, render_summary(runs, machine, seeds),
                        "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
