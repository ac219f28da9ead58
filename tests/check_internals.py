#!/usr/bin/env python3
"""docs/internals.md's checkable claims against the tree.

Usage: check_internals.py REPO_ROOT
Reads docs/internals.md and checks, beside what check_layers.py checks of the
code against its layer table, that the rest of the page says what the table and
the code say:
  - the tree drawing under "Layers" draws every module of the table, and an
    arrow A -> B exactly where A sits on B directly in the table;
  - the drawing by height puts every module of the table on one line, each
    above every module it sits on;
  - "What each piece holds" has one bullet per module of the table, each
    naming every file of its module (a header or source whose twin, the same
    name with .c for .h or the reverse, it names counts as named), and the
    parenthesis after a bullet's module names only files of that module;
  - the lock table under "Locks" has one row per rank of enum gpumem_lock_rank
    in lib/platform.h, in order, with the rank's number and name, "(leaf)"
    exactly on the leaves, and names the files of lib/ that make a lock of
    that rank (GPUMEM_RANK_<NAME>), no more and no fewer;
  - every `*_forget` it names is a function defined in lib/ (as named, or with
    the gpumem__ prefix);
  - the lengths it gives of a reason and a message are lib/internal.h's
    GPUMEM_REASON_LEN and GPUMEM_ERROR_BUF, less the NUL;
  - every gpumem_, gpumem__ or GPUMEM_ name it puts between backquotes is in
    include/gpumem.h or lib/, and every path it puts between backquotes exists
    (a bare file name: a file of lib/).
Prints each violation, naming the section and what disagrees, and exits 1;
prints a summary and exits 0 when there is none.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402  (its table parser and lib/ walk)

DOC = "docs/internals.md"
TREE_LINE = re.compile(r"^[ |]*[|`]-> (\w+)")
ROOT_LINE = re.compile(r"^(\w+)\b")
CODE = re.compile(r"`([^`\n]+)`")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def section(text, title):
    """The text of the '## title' section, up to the next '## '."""
    m = re.search(r"^## %s\s*$" % re.escape(title), text, re.M)
    if not m:
        return None
    rest = text[m.end():]
    end = re.search(r"^## ", rest, re.M)
    return rest[:end.start()] if end else rest


def code_blocks(text):
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)


def direct_edges(modules):
    return {(m, b) for m, (_, below) in modules.items() for b in below}


def check_tree(block, modules, bad):
    where = DOC + ", Layers, the tree drawing"
    drawn, seen, stack = set(), set(), []  # stack: (column, module)
    for n, line in enumerate(block.splitlines(), 1):
        m = TREE_LINE.match(line)
        if m:
            name, col = m.group(1), m.start(1)
        elif not stack and ROOT_LINE.match(line):
            name, col = ROOT_LINE.match(line).group(1), 0
        else:
            continue  # a description's second line
        if name not in modules:
            bad.append("%s, line %d: `%s` is no module of the layer table"
                       % (where, n, name))
            continue
        seen.add(name)
        while stack and stack[-1][0] >= col:
            stack.pop()
        if stack:
            drawn.add((stack[-1][1], name))
        elif col:
            bad.append("%s, line %d: `%s` hangs under nothing" % (where, n, name))
        stack.append((col, name))
    table = direct_edges(modules)
    for a, b in sorted(drawn - table):
        bad.append("%s: an arrow %s -> %s, but in the table %s does not sit on %s "
                   "directly" % (where, a, b, a, b))
    for a, b in sorted(table - drawn):
        bad.append("%s: %s sits on %s in the table, but no arrow %s -> %s is drawn"
                   % (where, a, b, a, b))
    for m in sorted(set(modules) - seen):
        bad.append("%s: module %s is not drawn" % (where, m))


def check_heights(block, modules, bad):
    where = DOC + ", Layers, the drawing by height"
    height = {}
    for n, line in enumerate(block.splitlines(), 1):
        for name in line.split():
            if name not in modules:
                bad.append("%s, line %d: `%s` is no module of the layer table"
                           % (where, n, name))
            elif name in height:
                bad.append("%s: %s is on lines %d and %d" % (where, name, height[name], n))
            else:
                height[name] = n
    for m in sorted(set(modules) - set(height)):
        bad.append("%s: module %s is on no line" % (where, m))
    for a, b in sorted(direct_edges(modules)):
        if a in height and b in height and height[a] >= height[b]:
            bad.append("%s: %s (line %d) is not above %s (line %d), which it sits on"
                       % (where, a, height[a], b, height[b]))


def twin(f):
    stem, ext = os.path.splitext(f)
    return stem + {".c": ".h", ".h": ".c"}.get(ext, ext)


def check_pieces(text, modules, bad):
    where = DOC + ", What each piece holds"
    start = text.find("What each piece holds:")
    if start < 0:
        bad.append("%s: no such list" % where)
        return
    bullets, cur = [], None
    for line in text[start:].splitlines()[1:]:
        if line.startswith("- "):
            cur = [line]
            bullets.append(cur)
        elif line.startswith("  ") and cur is not None:
            cur.append(line)
        elif line.strip() or bullets:
            if bullets and not line.strip():
                cur = None
                continue
            if bullets:
                break
    found = {}
    for b in bullets:
        body = " ".join(s.strip() for s in b)
        m = re.match(r"- \*\*(\w+)\*\*\s*(\([^)]*\))?", body)
        if not m:
            bad.append("%s: a bullet that names no module in bold: %s" % (where, body[:60]))
            continue
        name, paren = m.group(1), m.group(2) or ""
        if name not in modules:
            bad.append("%s: **%s** is no module of the layer table" % (where, name))
            continue
        if name in found:
            bad.append("%s: module %s has two bullets" % (where, name))
        found[name] = body
        files = modules[name][0]
        named = set(CODE.findall(body))
        for f in files:
            forms = {f, os.path.basename(f), twin(f), os.path.basename(twin(f))}
            if not forms & named:
                bad.append("%s: the bullet of %s does not name lib/%s (nor its twin), "
                           "a file of its module in the table" % (where, name, f))
        for f in CODE.findall(paren):
            if re.fullmatch(r"[\w/]+\.[ch]", f) and not any(
                    f in (g, os.path.basename(g)) for g in files):
                bad.append("%s: the bullet of %s names `%s` in its parenthesis, which is "
                           "not a file of %s in the table" % (where, name, f, name))
    for m in modules:
        if m not in found:
            bad.append("%s: module %s has no bullet" % (where, m))


def lock_ranks(platform_h):
    """[(value, name)] of enum gpumem_lock_rank, aliases included, and the
    value of GPUMEM_RANK_LEAF."""
    text = read(platform_h)
    m = re.search(r"enum gpumem_lock_rank\s*\{(.*?)\};", text, re.S)
    if not m:
        sys.exit("%s: no enum gpumem_lock_rank" % platform_h)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    values, out, nxt = {}, [], 0
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, value = (p.strip() for p in item.partition("="))
        if value:
            nxt = values[value] if value in values else int(value, 0)
        values[name] = nxt
        out.append((nxt, name))
        nxt += 1
    return out, values.get("GPUMEM_RANK_LEAF")


def check_locks(text, lib_dir, bad):
    where = DOC + ", Locks, the lock table"
    locks = section(text, "Locks")
    ranks, leaf = lock_ranks(os.path.join(lib_dir, "platform.h"))
    named = {n[len("GPUMEM_RANK_"):]: v for v, n in ranks
             if n not in ("GPUMEM_RANK_LEAF", "GPUMEM_RANK_COUNT")}
    rows = []
    for line in (locks or "").splitlines():
        m = re.match(r"\|\s*(\d+)\s+`(\w+)`\s*(\(leaf\))?\s*\|([^|]*)\|", line)
        if m:
            rows.append((int(m.group(1)), m.group(2), bool(m.group(3)), m.group(4)))
    if not rows:
        bad.append("%s: no rows" % where)
        return
    sources = {}
    for f in check_layers.lib_files(lib_dir):
        if not f.startswith("platform."):
            sources[f] = read(os.path.join(lib_dir, f))
    for n, name, is_leaf, cell in rows:
        if name not in named:
            bad.append("%s: row %d `%s`: no GPUMEM_RANK_%s in enum gpumem_lock_rank "
                       "(lib/platform.h)" % (where, n, name, name))
            continue
        if named[name] != n:
            bad.append("%s: row `%s` says rank %d; lib/platform.h gives GPUMEM_RANK_%s "
                       "the value %d" % (where, name, n, name, named[name]))
        if is_leaf != (leaf is not None and named[name] >= leaf):
            bad.append("%s: row `%s` is %smarked (leaf), but its rank is %s "
                       "GPUMEM_RANK_LEAF (%s)"
                       % (where, name, "" if is_leaf else "not ",
                          "below" if is_leaf else "at or above", leaf))
        cited = {c[len("lib/"):] for c in CODE.findall(cell) if c.startswith("lib/")}
        makers = {f for f, t in sources.items()
                  if re.search(r"\bGPUMEM_RANK_%s\b" % name, t)}
        for f in sorted(cited - makers):
            bad.append("%s: row `%s` names lib/%s, which makes no lock of rank "
                       "GPUMEM_RANK_%s" % (where, name, f, name))
        for f in sorted(makers - cited):
            bad.append("%s: lib/%s makes a lock of rank GPUMEM_RANK_%s, but row `%s` "
                       "does not name it" % (where, f, name, name))
    order = [n for n, *_ in rows]
    if order != sorted(order):
        bad.append("%s: the rows are not in rank order: %s" % (where, order))
    for name in sorted(set(named) - {r[1] for r in rows}):
        bad.append("%s: GPUMEM_RANK_%s (lib/platform.h) has no row"
                   % (where, name))


def check_names(text, root, bad):
    lib_dir = os.path.join(root, "lib")
    corpus = read(os.path.join(root, "include", "gpumem.h"))
    lib_sources = {}
    for f in check_layers.lib_files(lib_dir):
        lib_sources[f] = read(os.path.join(lib_dir, f))
        corpus += lib_sources[f]
    words = set(re.findall(r"\w+", corpus))
    basenames = {os.path.basename(f) for f in lib_sources}
    definitions = set()
    for f, t in lib_sources.items():
        if f.endswith(".c"):
            definitions |= set(re.findall(r"^(?:[\w*]+[ \t*]+)+\**(\w+)\(", t, re.M))
    checked = 0
    for span in CODE.findall(text):
        for name in re.findall(r"\b(?:gpumem_|GPUMEM_)\w*", span):
            after = span[span.index(name) + len(name):][:1]
            if name.endswith("_") or after == "<":
                continue  # a pattern: `gpumem__<object>_forget`
            checked += 1
            if name not in words:
                bad.append("%s names `%s`, which is in neither include/gpumem.h nor lib/"
                           % (DOC, name))
        for name in re.findall(r"\b(\w+_forget)\b", span):
            checked += 1
            short = name[len("gpumem__"):] if name.startswith("gpumem__") else name
            if short not in definitions and "gpumem__" + short not in definitions:
                bad.append("%s names `%s`, but lib/ defines no function %s nor "
                           "gpumem__%s" % (DOC, name, short, short))
        for path in re.findall(r"^[\w./-]+$", span):
            if re.match(r"(lib|tests|tools|include|docs|bench|cpp|python)/", path):
                checked += 1
                if not os.path.exists(os.path.join(root, path)):
                    bad.append("%s names `%s`, which does not exist" % (DOC, path))
            elif re.fullmatch(r"\w+\.[ch]", path):
                checked += 1
                if path not in basenames:
                    bad.append("%s names `%s`, which is no file of lib/" % (DOC, path))
    return checked


def check_lengths(text, lib_dir, bad):
    """"a reason holds N characters and a message M" against internal.h."""
    where = DOC + ", Errors: how they travel"
    m = re.search(r"a reason holds (\d+) characters and a message (\d+)", text)
    header = read(os.path.join(lib_dir, "internal.h"))
    sizes = {k: int(v) for k, v in re.findall(
        r"#define (GPUMEM_REASON_LEN|GPUMEM_ERROR_BUF) (\d+)", header)}
    if not m:
        bad.append("%s: no sentence \"a reason holds N characters and a message M\""
                   % where)
        return
    for said, macro in ((int(m.group(1)), "GPUMEM_REASON_LEN"),
                        (int(m.group(2)), "GPUMEM_ERROR_BUF")):
        if macro not in sizes:
            bad.append("%s: lib/internal.h defines no %s" % (where, macro))
        elif said != sizes[macro] - 1:
            bad.append("%s: says %d characters, but %s is %d (%d characters and the NUL)"
                       % (where, said, macro, sizes[macro], sizes[macro] - 1))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    md = os.path.join(root, DOC)
    lib_dir = os.path.join(root, "lib")
    modules = check_layers.parse_layers(md)
    text = read(md)
    bad = []
    layers = section(text, "Layers")
    blocks = code_blocks(layers or "")
    if len(blocks) < 2:
        bad.append("%s, Layers: two drawings expected, %d found" % (DOC, len(blocks)))
    else:
        check_tree(blocks[0], modules, bad)
        check_heights(blocks[1], modules, bad)
    check_pieces(layers or "", modules, bad)
    check_locks(text, lib_dir, bad)
    check_lengths(text, lib_dir, bad)
    names = check_names(text, root, bad)
    for line in bad:
        print(line)
    if bad:
        return 1
    print("%s: both drawings, the bullets, the lock table and %d names and paths "
          "agree with the layer table and the tree" % (DOC, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
