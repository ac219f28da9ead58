#!/usr/bin/env python3
"""lib/ against the layer list of docs/internals.md ("Layers"): arrows only downward.

Usage: check_layers.py LIB_DIR INTERNALS_MD [ARCHIVE NM]
Reads the table between <!-- layers: begin --> and <!-- layers: end --> (module,
its files in lib/, the modules it sits on) and checks that
  - every .c and .h file under LIB_DIR is in exactly one module, and every file
    listed exists;
  - the modules do not sit on each other in a circle;
  - every #include "..." that names a file of lib/ names one of the file's own
    module or of a module below it (sits on, transitively);
  - no two files of lib/ include each other in a circle;
  - with ARCHIVE (the static library, gpumem_core) and NM: every gpumem_ or
    gpumem__ symbol an object uses and another object defines is defined in its
    own module or below (an include check misses a function declared in a low
    header and defined in a higher file).
Prints each violation and exits 1; prints a summary and exits 0 when there is none.
"""
import os
import re
import subprocess
import sys

BEGIN, END = "<!-- layers: begin -->", "<!-- layers: end -->"
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def parse_layers(md_path):
    """{module: (files, sits_on)} from the table in the doc, in its order."""
    text = read(md_path)
    if BEGIN not in text or END not in text:
        sys.exit("%s: no layer table between %s and %s" % (md_path, BEGIN, END))
    modules = {}
    body = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("module", "") or set(cells[0]) <= set("-"):
            continue
        name, files, below = cells
        files = [f.strip("`") for f in files.split()]
        modules[name] = (files, below.split())
    if not modules:
        sys.exit("%s: the layer table is empty" % md_path)
    return modules


def find_cycle(graph):
    """A list of nodes forming a circle in {node: [successors]}, or None."""
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in graph.get(n, ()):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def below(modules):
    """{module: the set of modules it sits on, transitively}."""
    out = {}

    def walk(m, seen):
        for b in modules[m][1]:
            if b not in seen:
                seen.add(b)
                walk(b, seen)
        return seen

    for m in modules:
        out[m] = walk(m, set())
    return out


def lib_files(lib_dir):
    found = set()
    for root, _, names in os.walk(lib_dir):
        for n in names:
            if n.endswith((".c", ".h")):
                found.add(os.path.relpath(os.path.join(root, n), lib_dir))
    return found


def resolve_include(lib_dir, src, name):
    """The lib/ file that `#include "name"` in src names, or None (outside lib/)."""
    for base in (os.path.dirname(src), ""):
        rel = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(lib_dir, rel)):
            return rel
    return None


def object_symbols(archive, nm):
    """{member: (defined, undefined)} gpumem_ symbols of each object in the archive."""
    out = subprocess.run([nm, "-A", archive], check=True, capture_output=True,
                         text=True).stdout
    objs = {}
    for line in out.splitlines():
        # "path/libgpumem_core.a:runtime.c.o:0000000000000000 T gpumem_initialize"
        # or, for an undefined one, "...:runtime.c.o:                 U gpumem__fail"
        head, _, rest = line.rpartition(":")
        member = os.path.basename(head.rpartition(":")[2])  # thin archives: a path
        fields = rest.split()
        if len(fields) < 2 or not fields[-1].startswith("gpumem_"):
            continue
        kind, sym = fields[-2], fields[-1]
        d, u = objs.setdefault(member, (set(), set()))
        (u if kind == "U" else d).add(sym)
    return objs


def main():
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    lib_dir, md = sys.argv[1], sys.argv[2]
    modules = parse_layers(md)
    bad = []

    module_of = {}
    for m, (files, sits_on) in modules.items():
        for f in files:
            if f in module_of:
                bad.append("%s is listed in %s and in %s" % (f, module_of[f], m))
            module_of[f] = m
        for b in sits_on:
            if b not in modules:
                bad.append("%s sits on %s, which is not a module of the table" % (m, b))
    present = lib_files(lib_dir)
    for f in sorted(present - set(module_of)):
        bad.append("lib/%s is in no module: add it to the layer table of %s" % (f, md))
    for f in sorted(set(module_of) - present):
        bad.append("lib/%s is listed in module %s but does not exist" % (f, module_of[f]))
    if bad:
        for line in bad:
            print(line)
        return 1
    cycle = find_cycle({m: sits_on for m, (_, sits_on) in modules.items()})
    if cycle:
        print("the modules sit on each other in a circle: %s" % " -> ".join(cycle))
        return 1
    under = below(modules)

    def allowed(a, b):
        return b == a or b in under[a]

    graph, includes = {}, 0
    for f in sorted(present):
        graph[f] = []
        for name in INCLUDE.findall(read(os.path.join(lib_dir, f))):
            target = resolve_include(lib_dir, f, name)
            if target is None:
                continue  # gpumem.h, or a system header: not a module of lib/
            includes += 1
            graph[f].append(target)
            a, b = module_of[f], module_of[target]
            if not allowed(a, b):
                bad.append('lib/%s (%s) includes "%s" (%s): %s does not sit on %s; '
                           "arrows go down only (docs/internals.md, Layers)"
                           % (f, a, name, b, a, b))
    cycle = find_cycle(graph)
    if cycle:
        bad.append("files of lib/ include each other in a circle: %s"
                   % " -> ".join("lib/" + f for f in cycle))

    refs = 0
    if len(sys.argv) == 5:
        archive, nm = sys.argv[3], sys.argv[4]
        # Meson names the object of lib/backend/cuda.c "backend_cuda.c.o".
        source_of = {f.replace("/", "_") + ".o": f for f in present if f.endswith(".c")}
        objs = object_symbols(archive, nm)
        definer = {}
        for member, (defined, _) in objs.items():
            for sym in defined:
                definer[sym] = member
        for member in sorted(objs):
            if member not in source_of:
                bad.append("%s: an object of %s with no source file in lib/"
                           % (member, archive))
                continue
            f = source_of[member]
            for sym in sorted(objs[member][1]):
                if sym not in definer:
                    continue  # not defined in the library (a libc or libdl symbol)
                refs += 1
                g = source_of.get(definer[sym])
                if g and not allowed(module_of[f], module_of[g]):
                    bad.append("lib/%s (%s) uses %s, defined in lib/%s (%s): %s does not "
                               "sit on %s; arrows go down only (docs/internals.md, Layers)"
                               % (f, module_of[f], sym, g, module_of[g], module_of[f],
                                  module_of[g]))

    for line in bad:
        print(line)
    if bad:
        return 1
    print("%d files of lib/ in %d modules: %d includes%s, all downward, no circle"
          % (len(present), len(modules), includes,
             " and %d uses of symbols across objects" % refs if refs else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
