"""A picture of gpumem's memory without a browser viewer.

    python3 -m gpumem.map SNAPSHOT -o map.svg     # or map.html

SNAPSHOT is a file written by gpumem.dump_snapshot (pickle or JSON), by the C
call gpumem_snapshot_file, by GPUMEM_OOM_SNAPSHOT, or by PyTorch's
torch.cuda.memory._dump_snapshot. Each segment is a bar, its chunks coloured by
state and tag (free chunks grey, untagged allocations blue, each tag a colour of
its own, blocks freed on a stream whose work has not completed yet dark
grey), the largest free block outlined in red, and the totals beside the bar.
An .html output embeds the SVG and lists the largest allocations.

    python3 -m gpumem.map snap.json -o snap.pickle

writes the snapshot as the pickle PyTorch's viewer opens (its MemoryViz.js reads
every file with its own unpickler): for the JSON of gpumem_snapshot_file and
GPUMEM_OOM_SNAPSHOT.
"""

import argparse
import html
import pickle
import sys
import zlib

from . import _files
from .snapshot import PICKLE_PROTOCOL, load_snapshot

BAR_WIDTH = 900
BAR_HEIGHT = 26
LEFT = 10
TEXT_WIDTH = 330
ROW = 58
FREE = "#d9d9d9"
PENDING = "#6b6b6b"  # active_pending_free: freed, its stream's work not done
UNTAGGED = "#4e79a7"
LARGEST_FREE = "#e15759"
# Tag colours (Tableau 10 without the two above): chosen by the tag's CRC, so a
# tag has the same colour in every picture.
TAG_COLOURS = ["#f28e2c", "#76b7b2", "#59a14f", "#edc949", "#af7aa1", "#ff9da7",
               "#9c755f", "#bab0ab"]


def _size(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else "%.2f %s" % (n, unit)
        n /= 1024.0
    return "%d" % n


def _tag_of(block):
    tag = block.get("tag")
    if tag is None and block.get("frames"):  # a PyTorch snapshot: its top frame
        f = block["frames"][0]
        tag = "%s:%s" % (f.get("filename", "?"), f.get("line", "?"))
    return tag


def _colour(block):
    if block["state"] == "active_pending_free":
        return PENDING
    if block["state"] != "active_allocated":
        return FREE
    tag = _tag_of(block)
    if not tag:
        return UNTAGGED
    return TAG_COLOURS[zlib.crc32(tag.encode("utf-8")) % len(TAG_COLOURS)]


def _segment_rects(seg, y):
    """SVG elements of one segment's bar: chunks narrower than a pixel are drawn
    together, in the colour of the state that holds most of their bytes."""
    total = seg["total_size"] or 1
    scale = BAR_WIDTH / total
    out = []
    largest = None
    addr = seg["address"]
    run = None  # [x0, x1, {colour: bytes}]

    def flush():
        if run:
            colour = max(run[2].items(), key=lambda kv: kv[1])[0]
            out.append('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"/>'
                       % (LEFT + run[0], y, max(run[1] - run[0], 0.5), BAR_HEIGHT, colour))

    for b in seg["blocks"]:
        x0 = (addr - seg["address"]) * scale
        x1 = (addr + b["size"] - seg["address"]) * scale
        if b["state"] == "inactive" and (largest is None or b["size"] > largest[2]):
            largest = (x0, x1, b["size"])
        colour = _colour(b)
        if run and (x1 - run[0] < 1.0 or run[1] - run[0] < 1.0):
            run[1] = x1
            run[2][colour] = run[2].get(colour, 0) + b["size"]
        else:
            flush()
            run = [x0, x1, {colour: b["size"]}]
        addr += b["size"]
    flush()
    return out, largest


def render_svg(snap):
    """The map of a snapshot (dict) as SVG text."""
    segs = sorted(snap.get("segments", []), key=lambda s: (s.get("device", 0),
                                                           s["address"]))
    width = LEFT + BAR_WIDTH + TEXT_WIDTH
    height = 40 + ROW * max(len(segs), 1) + 30
    e = html.escape
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
             'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">'
             % (width, height, width, height),
             '<rect width="100%" height="100%" fill="white"/>']
    # in use: allocated, or freed on a stream and still waiting for its work
    in_use = sum(b["size"] for s in segs for b in s["blocks"] if b["state"] != "inactive")
    reserved = sum(s["total_size"] for s in segs)
    parts.append('<text x="%d" y="20" font-size="14" font-weight="bold">gpumem: %d '
                 'segments, %s in use of %s reserved</text>'
                 % (LEFT, len(segs), e(_size(in_use)), e(_size(reserved))))
    for i, seg in enumerate(segs):
        y = 40 + ROW * i
        used = sum(b["size"] for b in seg["blocks"] if b["state"] != "inactive")
        parts.append('<text x="%d" y="%d">/device:GPU:%s %s at 0x%x, %s</text>'
                     % (LEFT, y + 10, seg.get("device", 0), e(seg.get("kind", "segment")),
                        seg["address"], e(_size(seg["total_size"]))))
        rects, largest = _segment_rects(seg, y + 16)
        parts.append('<g class="segment">')
        parts.extend(rects)
        parts.append('</g>')
        parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" '
                     'stroke="#333" stroke-width="1"/>' % (LEFT, y + 16, BAR_WIDTH,
                                                          BAR_HEIGHT))
        free_note = "no free block"
        if largest:
            parts.append('<rect class="largest-free" x="%.2f" y="%d" width="%.2f" '
                         'height="%d" fill="none" stroke="%s" stroke-width="2.5"/>'
                         % (LEFT + largest[0], y + 15, max(largest[1] - largest[0], 1.0),
                            BAR_HEIGHT + 2, LARGEST_FREE))
            free_note = "largest free %s" % _size(largest[2])
        parts.append('<text x="%d" y="%d">%s used, %s free</text>'
                     % (LEFT + BAR_WIDTH + 10, y + 28, e(_size(used)),
                        e(_size(seg["total_size"] - used))))
        parts.append('<text x="%d" y="%d" fill="%s">%s</text>'
                     % (LEFT + BAR_WIDTH + 10, y + 42, LARGEST_FREE, e(free_note)))
    # legend: the states and the tags seen
    y = 40 + ROW * max(len(segs), 1) + 10
    tags = sorted({_tag_of(b) for s in segs for b in s["blocks"]
                   if b["state"] == "active_allocated" and _tag_of(b)})
    legend = [("free", FREE), ("allocated, no tag", UNTAGGED)]
    if any(b["state"] == "active_pending_free" for s in segs for b in s["blocks"]):
        legend.append(("freed, waiting for its stream", PENDING))
    legend += [("tag " + t, _colour({"state": "active_allocated", "tag": t}))
               for t in tags[:6]]
    x = LEFT
    for label, colour in legend:
        parts.append('<rect x="%d" y="%d" width="12" height="12" fill="%s"/>'
                     % (x, y, colour))
        parts.append('<text x="%d" y="%d">%s</text>' % (x + 16, y + 10, e(label)))
        x += 28 + 7 * len(label)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def render_html(snap, largest=20):
    """A page with the map and a table of the `largest` largest allocations."""
    e = html.escape
    live = [(b, s) for s in snap.get("segments", []) for b in s["blocks"]
            if b["state"] == "active_allocated"]
    live.sort(key=lambda bs: -bs[0]["size"])
    rows = []
    for b, s in live[:largest]:
        addr = b["address"]
        rows.append("<tr><td>/device:GPU:%s</td><td>0x%x</td><td>%s</td><td>%s</td>"
                    "<td>%s</td><td>%s</td></tr>"
                    % (s.get("device", 0), addr, e(_size(b["size"])),
                       e(_size(b.get("requested_size", b["size"]))),
                       b.get("seq", ""), e(_tag_of(b) or "")))
    devices = "".join(
        "<li>%s: %s in use, %s reserved, budget %s (%s)</li>"
        % (e(d["name"]), e(_size(d["in_use"])), e(_size(d["reserved"])),
           e(_size(d["budget"])), e(d.get("budget_reason") or ""))
        for d in snap.get("devices", []))
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            "<title>gpumem memory map</title><style>body{font-family:sans-serif;"
            "margin:16px}table{border-collapse:collapse}td,th{border:1px solid #bbb;"
            "padding:2px 8px;text-align:right}</style></head><body>\n"
            "<h1>gpumem memory map</h1>\n<ul id=\"devices\">%s</ul>\n%s"
            "<h2>The %d largest allocations</h2>\n<table id=\"largest\"><tr><th>device"
            "</th><th>address</th><th>size</th><th>requested</th><th>seq</th>"
            "<th>tag</th></tr>\n%s\n</table>\n</body></html>\n"
            % (devices, render_svg(snap), min(largest, len(live)), "\n".join(rows)))


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python3 -m gpumem.map",
        description="Draws a gpumem (or PyTorch) memory snapshot as SVG or HTML, "
                    "or writes it as the pickle PyTorch's memory viewer opens.")
    parser.add_argument("snapshot", help="a snapshot file, pickle or JSON")
    parser.add_argument("-o", "--output", required=True,
                        help="map.svg, map.html for a page with the largest "
                             "allocations, or snap.pickle for PyTorch's viewer")
    args = parser.parse_args(argv)
    snap = load_snapshot(args.snapshot)
    # whole or not at all, never through a link at the path (gpumem._files)
    if args.output.endswith((".pickle", ".pkl")):
        _files.write_whole(args.output, pickle.dumps(snap, protocol=PICKLE_PROTOCOL))
        return 0
    text = render_html(snap) if args.output.endswith((".html", ".htm")) \
        else render_svg(snap)
    _files.write_whole(args.output, text.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
