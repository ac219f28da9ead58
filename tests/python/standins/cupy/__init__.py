"""Stand-in for CuPy (tests only): ``cupy.cuda`` as gpumem.cupy_allocator uses it."""

from . import cuda  # noqa: F401
