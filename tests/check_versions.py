#!/usr/bin/env python3
"""The version is written in four places; this checks that they agree.

Usage: check_versions.py VERSION HEADER PY_INIT PY_LIB
VERSION is meson.project_version(); HEADER include/gpumem.h; PY_INIT and PY_LIB
python/gpumem/__init__.py and _lib.py. Prints what differs and exits 1.
"""
import re
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def main():
    version, header, py_init, py_lib = sys.argv[1:5]
    major, minor, patch = (int(x) for x in version.split("."))
    text = read(header)
    found = {name: re.search(r"#define GPUMEM_VERSION_%s (\S+)" % name, text)
             for name in ("MAJOR", "MINOR", "PATCH", "STRING")}
    want = {"MAJOR": str(major), "MINOR": str(minor), "PATCH": str(patch),
            "STRING": '"%s"' % version}
    bad = ["%s: GPUMEM_VERSION_%s is %s, the project's version %s"
           % (header, k, found[k].group(1) if found[k] else "missing", version)
           for k in want if not found[k] or found[k].group(1) != want[k]]
    m = re.search(r'^__version__ = "([^"]*)"', read(py_init), re.M)
    if not m or m.group(1) != version:
        bad.append("%s: __version__ is %s, the project's version %s"
                   % (py_init, m.group(1) if m else "missing", version))
    m = re.search(r"^EXPECTED_VERSION = \((\d+), (\d+)\)", read(py_lib), re.M)
    if not m or (int(m.group(1)), int(m.group(2))) != (major, minor):
        bad.append("%s: EXPECTED_VERSION is %s, the project's version %d.%d"
                   % (py_lib, m.group(0) if m else "missing", major, minor))
    for line in bad:
        print(line)
    if not bad:
        print("version %s in the header, the Python package and the library" % version)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
