"""Shared helpers for the Python tests.

gpumem's default runtime is created once per process, from the environment,
at the first call; so every scenario runs in a fresh interpreter with its own
environment (``run``). The library is found as the package finds it:
GPUMEM_LIBRARY when set (./run.sh sets it to build/lib/libgpumem.so), else the
source checkout's build/ folder.

Run: /usr/bin/python3 -m pytest -q tests/python
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")

# The simulated machines the TensorFlow snippets run on.
MACHINES = {1: "12GiB", 2: "12GiB,24GiB", 3: "8GiB,12GiB,24GiB"}

# The ledgers of the scenarios' GPUs (issue 23): a folder of this test run's
# own, so that scenarios over the driver double (whose GPUs have one UUID in
# every process) never meet a real ledger in /dev/shm nor another test run's,
# and leave no file behind.
LEDGER_DIR = tempfile.mkdtemp(prefix="gpumem-test-ledgers-")
atexit.register(shutil.rmtree, LEDGER_DIR, ignore_errors=True)

# Variables that change what the default runtime does: none may leak in.
_CLEARED_PREFIXES = ("GPUMEM_", "TF_", "CUDA_VISIBLE_DEVICES")


def scenario_env(gpus="12GiB,24GiB", extra=None):
    """A clean environment for one scenario on simulated GPUs `gpus`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_CLEARED_PREFIXES) or k == "GPUMEM_LIBRARY"}
    env["PYTHONPATH"] = PYTHON_DIR
    env["GPUMEM_BACKEND"] = "sim"
    env["GPUMEM_SIM_DEVICES"] = gpus
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["GPUMEM_LEDGER_DIR"] = LEDGER_DIR
    env.update(extra or {})
    return env


def _scenario(script, gpus, env, expect_fail, cwd):
    """Runs `script` (dedented) in a fresh interpreter; returns the finished
    process. Fails the test with both streams when the exit status is not the
    one expected (0, or non-zero with expect_fail)."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=scenario_env(gpus, env), cwd=cwd or ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    if (proc.returncode != 0) != expect_fail:
        pytest.fail("scenario exited with %d\n--- script\n%s\n--- stdout\n%s--- stderr\n%s"
                    % (proc.returncode, textwrap.dedent(script), proc.stdout, proc.stderr))
    return proc


def run(script, gpus="12GiB,24GiB", env=None, expect_fail=False, cwd=None):
    """Runs `script` (dedented) in a fresh interpreter; returns its stdout, or
    with expect_fail the finished process (see _scenario)."""
    proc = _scenario(script, gpus, env, expect_fail, cwd)
    return proc.stdout if not expect_fail else proc


def run_stderr(script, gpus="12GiB,24GiB", env=None):
    """As run(), for a script that must succeed; returns what it wrote to
    standard error (the library's own lines among it)."""
    return _scenario(script, gpus, env, False, None).stderr


def driver_double():
    """The CUDA driver test double (tests/fakecuda) built beside the library the
    tests load; skips the test when there is none."""
    lib = os.environ.get("GPUMEM_LIBRARY") or os.path.join(ROOT, "build", "lib",
                                                          "libgpumem.so")
    path = os.path.join(os.path.dirname(os.path.dirname(lib)), "tests", "libcuda.so.1")
    if not os.path.exists(path):
        pytest.skip("no CUDA driver double at %s (build with -Dtests=true)" % path)
    return path


def assert_output(actual, expected):
    """Compares printed lines; an expected line ending in '...' is a prefix
    (TensorFlow's sentence, after which gpumem's message follows)."""
    want = textwrap.dedent(expected).strip("\n").splitlines()
    got = actual.strip("\n").splitlines()
    ok = len(want) == len(got) and all(
        g.startswith(w[:-3]) if w.endswith("...") else g == w for w, g in zip(want, got))
    assert ok, "printed output differs\n--- expected\n%s\n--- got\n%s" % (
        "\n".join(want), "\n".join(got))
