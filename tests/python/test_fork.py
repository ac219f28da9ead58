"""multiprocessing and fork(): a worker started with the 'fork' method inherits
the parent's default runtime, which the parent initialized, and gets the
package's exception (UnsupportedError, a RuntimeError) with the library's
message; a worker started with 'spawn' has a runtime of its own and allocates.
Each scenario is a script file, so that 'spawn' can import its __main__. Both
skip where multiprocessing cannot make its locks (no writable /dev/shm)."""

import multiprocessing
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import scenario_env

SCRIPT = """
import gc
import multiprocessing
import os
import sys
import warnings

import gpumem
from gpumem import errors

def worker(queue):
    try:
        buf = gpumem.malloc(1 << 20)
        buf.free()
        queue.put(("ok", os.getpid(), ""))
    except errors.GpumemError as e:
        queue.put((type(e).__name__, isinstance(e, RuntimeError), str(e)))

def dropper(queue):
    # A buffer of the parent's, dropped in the child: nothing to free here, and
    # nothing to warn about; an explicit free says why it cannot.
    global dropped
    warnings.simplefilter("always")
    del dropped
    gc.collect()
    try:
        inherited.free()
        queue.put("freed")
    except errors.UnsupportedError as e:
        queue.put(str(e))

if __name__ == "__main__":
    inherited = gpumem.malloc(4 << 20)  # initializes the default runtime here
    dropped = gpumem.malloc(1 << 20)
    ctx = multiprocessing.get_context(sys.argv[1])
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(queue,))
    proc.start()
    print(repr(queue.get(timeout=60)))
    proc.join(60)
    print("exitcode", proc.exitcode)
    if sys.argv[1] == "fork":
        proc = ctx.Process(target=dropper, args=(queue,))
        proc.start()
        print(repr(queue.get(timeout=60)))
        proc.join(60)
    # the parent is unaffected
    other = gpumem.malloc(1 << 20)
    other.free()
    inherited.free()
    dropped.free()
    print("parent", os.getpid(), "ok")
"""


def semaphores_unusable():
    """Why multiprocessing cannot make the locks its Queue needs here, or None.
    They are POSIX semaphores (sem_open), which Linux keeps in /dev/shm: where
    that is read-only or missing, every Queue fails with OSError. Probed in the
    'fork' context, which unlinks its semaphore at once (another context would
    start a resource tracker in this process)."""
    try:
        multiprocessing.get_context("fork").Lock()
    except ImportError as e:  # a Python built without sem_open
        return "multiprocessing has no working semaphores here (%s)" % e
    except OSError as e:
        return ("multiprocessing cannot create a lock (a POSIX semaphore, kept in /dev/shm)"
                " here: %s" % e)
    return None


def run_method(tmp_path, method):
    why = semaphores_unusable()
    if why is not None:
        pytest.skip(why)
    script = tmp_path / "workers.py"
    script.write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run([sys.executable, str(script), method],
                          env=scenario_env("1GiB"), cwd=str(tmp_path),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=120)
    if proc.returncode != 0:
        pytest.fail("exited with %d\n--- stdout\n%s--- stderr\n%s"
                    % (proc.returncode, proc.stdout, proc.stderr))
    return proc


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_worker_is_refused_the_parents_runtime(tmp_path):
    proc = run_method(tmp_path, "fork")
    lines = proc.stdout.splitlines()
    parent = int(lines[-1].split()[1])
    name, is_runtime_error, message = eval(lines[0])
    assert name == "UnsupportedError"
    assert is_runtime_error
    assert message.startswith("gpumem_malloc(/device:GPU:0, 1.00 MiB): this process (pid ")
    assert ("descends by fork() from the one that initialized the default runtime (pid %d)" % parent
            in message)
    assert "start worker processes with the 'spawn' method" in message
    assert lines[1] == "exitcode 0"
    freed = eval(lines[2])
    assert freed.startswith("gpumem_free(0x")
    assert "descends by fork() from the one that initialized the default runtime" in freed
    assert "freeing a collected buffer failed" not in proc.stderr
    assert lines[-1].endswith(" ok")


def test_a_spawned_worker_has_a_runtime_of_its_own(tmp_path):
    proc = run_method(tmp_path, "spawn")
    lines = proc.stdout.splitlines()
    status, pid, message = eval(lines[0])
    assert (status, message) == ("ok", "")
    assert pid != int(lines[-1].split()[1])
    assert lines[1] == "exitcode 0"
    assert lines[-1].endswith(" ok")
