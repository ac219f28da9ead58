"""Finding libgpumem.so: GPUMEM_LIBRARY first, then beside the package, then
the source checkout's Meson build folder, then the system's library path; an
ImportError that lists every place when none loads; the version check."""

import ctypes.util
import glob
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON_DIR, ROOT, run


def _lib_sanitized(path):
    with open(path, "rb") as f:
        return b"libasan.so" in f.read()


def library_in_use():
    return run("import gpumem; print(gpumem.library_path)").strip()


def copy_library(to):
    """Copies the library these tests load to the file `to`, making its folder;
    returns `to`."""
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.realpath(library_in_use()), to)
    return to


def copy_package(tmp_path, checkout=True):
    """The package copied to tmp_path/site; with `checkout`, tmp_path is made to
    look like gpumem's source tree (its build folders are then searched)."""
    dest = tmp_path / "site"
    shutil.copytree(os.path.join(PYTHON_DIR, "gpumem"), dest / "gpumem",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    if checkout:
        shutil.copy(os.path.join(ROOT, "meson.build"), tmp_path / "meson.build")
        (tmp_path / "include").mkdir()
        shutil.copy(os.path.join(ROOT, "include", "gpumem.h"),
                    tmp_path / "include" / "gpumem.h")
    return dest


def import_error(pythonpath, **env):
    proc = run("import gpumem", env=dict(env, PYTHONPATH=str(pythonpath)),
               expect_fail=True)
    assert "ImportError" in proc.stderr, proc.stderr
    return proc.stderr


def test_version_matches_the_package():
    out = run("""
        import gpumem
        from gpumem import _lib
        assert gpumem.library_version[:2] == _lib.EXPECTED_VERSION == (0, 2)
        print(gpumem.library_path)
        """)
    assert "libgpumem.so" in out


def test_source_checkout_finds_its_build_folder():
    # The real checkout: its own build folder, where ./run.sh builds. A clone
    # built elsewhere (meson setup /tmp/b) has none to find; the rule itself is
    # tested on copies below.
    if not glob.glob(os.path.join(ROOT, "build*", "lib", "libgpumem.so")):
        pytest.skip("this checkout has no build*/lib/libgpumem.so")
    assert not os.path.exists(os.path.join(PYTHON_DIR, "gpumem", "_installed.py"))
    path = run("import gpumem; print(gpumem.library_path)",
               env={"GPUMEM_LIBRARY": ""}).strip()
    assert os.path.commonpath([path, ROOT]) == ROOT, path
    assert os.path.basename(os.path.dirname(os.path.dirname(path))).startswith("build"), path
    build = os.path.join(ROOT, "build", "lib", "libgpumem.so")
    if os.path.exists(build) and not _lib_sanitized(build):
        assert path == build


def test_gpumem_library_wins_and_is_the_only_place_when_set(tmp_path):
    real = os.path.realpath(library_in_use())
    copy = tmp_path / "elsewhere" / "libgpumem-copy.so"
    copy.parent.mkdir()
    shutil.copy(real, copy)
    assert run("import gpumem; print(gpumem.library_path)",
               env={"GPUMEM_LIBRARY": str(copy)}).strip() == str(copy)
    err = import_error(PYTHON_DIR, GPUMEM_LIBRARY=str(tmp_path / "missing.so"))
    assert "GPUMEM_LIBRARY=" in err and "missing.so not found" in err
    text = tmp_path / "not-a-library.so"
    text.write_text("hello")
    assert "cannot load" in import_error(PYTHON_DIR, GPUMEM_LIBRARY=str(text))


def test_beside_the_package(tmp_path):
    site = copy_package(tmp_path)
    copy_library(site / "gpumem" / "libgpumem.so")
    out = run("import gpumem; print(gpumem.library_path)",
              env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site)})
    assert out.strip() == str(site / "gpumem" / "libgpumem.so")


def write_installed(site, library):
    """gpumem/_installed.py as `meson install` writes it (python/_installed.py.in)."""
    (site / "gpumem" / "_installed.py").write_text("LIBRARY = %r\n" % str(library))


def test_the_library_installed_with_the_package(tmp_path):
    """An installed package loads the library its _installed.py names (a prefix
    outside the loader's path), not whatever the system has."""
    site = copy_package(tmp_path, checkout=False)
    installed = copy_library(tmp_path / "pre fix" / "lib" / "libgpumem.so.1")
    write_installed(site, installed)
    out = run("import gpumem; print(gpumem.library_path)",
              env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site), "LD_LIBRARY_PATH": ""})
    assert out.strip() == str(installed)


def test_an_installed_path_that_is_gone_is_passed_over(tmp_path):
    """_installed.py names a library that is no longer there: the search goes on
    (here to the checkout's build folder) and an ImportError would list it."""
    site = copy_package(tmp_path)
    gone = tmp_path / "removed" / "libgpumem.so.1"
    write_installed(site, gone)
    plain = copy_library(tmp_path / "build" / "lib" / "libgpumem.so")
    out = run("import gpumem; print(gpumem.library_path)",
              env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site)})
    assert out.strip() == str(plain)
    out = run("""
        from gpumem import _lib
        for where, path, skip in _lib.candidates():
            print("%s: %s" % (where, path))
        """, env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site)})
    assert "installed with the package (gpumem/_installed.py): %s\n" % gone in out, out
    if not ctypes.util.find_library("gpumem"):
        plain.unlink()
        err = import_error(site, GPUMEM_LIBRARY="", LD_LIBRARY_PATH="")
        assert "%s: not found" % gone in err, err


def test_found_by_the_loader_the_path_is_the_file_it_opened(tmp_path):
    """Loaded by its soname through LD_LIBRARY_PATH: library_path is the full
    path of the file the dynamic loader opened (dladdr), not the soname."""
    if ctypes.util.find_library("gpumem"):
        pytest.skip("a libgpumem is installed on the system library path")
    site = copy_package(tmp_path, checkout=False)
    loader_dir = copy_library(tmp_path / "loader dir" / "libgpumem.so.1").parent
    out = run("import gpumem; print(gpumem.library_path)",
              env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site),
                   "LD_LIBRARY_PATH": str(loader_dir)})
    assert out.strip() == str(loader_dir / "libgpumem.so.1")


def test_build_folders_are_searched_only_in_a_checkout(tmp_path):
    """A package copied anywhere else must not load a libgpumem.so that lies in a
    build-* folder two levels up (in /tmp, anyone could put one there)."""
    site = copy_package(tmp_path, checkout=False)
    planted = copy_library(tmp_path / "build-planted" / "lib" / "libgpumem.so")
    proc = run("import gpumem; print(gpumem.library_path)",
               env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site), "LD_LIBRARY_PATH": ""},
               expect_fail=ctypes.util.find_library("gpumem") is None)
    text = proc if isinstance(proc, str) else proc.stderr
    assert str(planted) not in text, text
    assert "Meson build folder" not in text, text


def test_a_sanitized_build_folder_is_passed_over(tmp_path):
    """build/ built with ASan: loading it would end the interpreter (ASan's
    runtime must come first), so the next build folder is taken."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for a sanitized stub library")
    site = copy_package(tmp_path)
    sanitized = tmp_path / "build" / "lib" / "libgpumem.so"
    sanitized.parent.mkdir(parents=True)
    src = tmp_path / "asan.c"
    src.write_text("unsigned gpumem_version(void) { return 100u; }\n")
    built = subprocess.run([cc, "-shared", "-fPIC", "-fsanitize=address", str(src),
                            "-o", str(sanitized)], capture_output=True)
    if built.returncode != 0:
        pytest.skip("the compiler cannot build with -fsanitize=address")
    plain = copy_library(tmp_path / "build-plain" / "lib" / "libgpumem.so")
    out = run("import gpumem; print(gpumem.library_path)",
              env={"GPUMEM_LIBRARY": "", "PYTHONPATH": str(site)})
    assert out.strip() == str(plain)


def test_import_error_lists_where_it_looked(tmp_path):
    if ctypes.util.find_library("gpumem"):
        pytest.skip("a libgpumem is installed on the system library path")
    site = copy_package(tmp_path)
    err = import_error(site, GPUMEM_LIBRARY="", LD_LIBRARY_PATH="")
    for place in ("GPUMEM_LIBRARY: not set", "beside the package",
                  str(site / "gpumem" / "libgpumem.so"), "Meson build folder",
                  str(tmp_path / "build" / "lib" / "libgpumem.so"),
                  "system library path", "meson setup build"):
        assert place in err, (place, err)


def _stub_library(tmp_path, version):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for a stub library")
    names = run("from gpumem import _lib; print(' '.join(_lib._REQUIRED))").split()
    src = tmp_path / "stub.c"
    lines = ["unsigned gpumem_version(void) { return %du; }" % version]
    lines += ["int %s(void) { return 0; }" % n for n in names if n != "gpumem_version"]
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "libstub.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
    return out


def test_a_library_of_another_version_is_refused(tmp_path):
    stub = _stub_library(tmp_path, 20300)  # 2.3.0
    err = import_error(PYTHON_DIR, GPUMEM_LIBRARY=str(stub))
    assert "is version 2.3.0; this package needs 0.2.x" in err, err
    assert "changed the ABI" not in err, err


def test_a_library_from_before_struct_size_is_refused(tmp_path):
    """A 0.1 library has every function the package binds, but its structs lack
    the leading struct_size: it is refused, and the message says why."""
    stub = _stub_library(tmp_path, 100)  # 0.1.0
    err = import_error(PYTHON_DIR, GPUMEM_LIBRARY=str(stub))
    assert "is version 0.1.0; this package needs 0.2.x (0.2 changed the ABI: its " \
        "structs begin with struct_size; libgpumem.so.1)" in err, err


def test_a_library_without_the_functions_is_refused(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler for a stub library")
    src = tmp_path / "old.c"
    src.write_text("unsigned gpumem_version(void) { return 100u; }\n")
    old = tmp_path / "libold.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(old)], check=True)
    err = import_error(PYTHON_DIR, GPUMEM_LIBRARY=str(old))
    assert "lacks gpumem_status_string()" in err, err
