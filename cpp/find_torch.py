"""Prints where the PyTorch that this python3 would import keeps its C++
headers and libc10, for libgpumem_torch_c10.so: three lines, the include
folder, the library folder and torch's version; nothing (status 1) when there
is no such PyTorch, or it has no headers or no libc10. It does not import
torch (seconds, and a CUDA initialization check): it reads the package's
files."""

import importlib.util
import os
import re
import sys


def main():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return 1
    root = list(spec.submodule_search_locations)[0]
    include = os.path.join(root, "include")
    lib = os.path.join(root, "lib")
    if not os.path.isfile(os.path.join(include, "c10", "util", "Exception.h")):
        return 1
    if not os.path.isfile(os.path.join(lib, "libc10.so")):
        return 1
    version = "unknown"
    try:
        with open(os.path.join(root, "version.py")) as f:
            m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", f.read(), re.M)
            if m:
                version = m.group(1)
    except OSError:
        pass
    print(include)
    print(lib)
    print(version)
    return 0


if __name__ == "__main__":
    sys.exit(main())
