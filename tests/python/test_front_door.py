"""README's first screen: the commands it gives to try after the demo run as
written, from the checkout, with what `./run.sh demo` built (build/), and do
what the README says they do. Each is taken from README.md itself (the shell
block after "After the demo"), so a changed command is tested as changed. The
shared simulated GPU's name is made this run's own, and its files and ledgers
go with it, so that parallel runs of the tests never meet."""

import glob
import os
import re
import subprocess

import pytest

from conftest import LEDGER_DIR, ROOT

README = os.path.join(ROOT, "README.md")


def next_steps():
    """The commands of the first shell block after "After the demo" in README's
    "The two commands", continuation lines joined."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## The two commands"):text.index("### The demo")]
    after = section[re.search(r"After\s+the\s+demo", section).start():]
    block = re.search(r"```sh\n(.*?)```", after, re.S).group(1)
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def run_step(command):
    machine = "front%d" % os.getpid()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEM_", "TF_")) or k == "GPUMEM_LIBRARY"}
    env["GPUMEM_LEDGER_DIR"] = LEDGER_DIR
    if not os.path.exists(os.path.join(ROOT, "build", "examples", "gpumem-quickstart")):
        pytest.skip("build/ has no gpumem-quickstart (./run.sh demo builds it)")
    try:
        proc = subprocess.run(
            ["bash", "-c", command.replace("GPUMEM_SIM_MACHINE=lab",
                                           "GPUMEM_SIM_MACHINE=" + machine)],
            env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=120)
    finally:
        for path in glob.glob("/dev/shm/gpumem-sim-%s*" % machine):
            os.unlink(path)
    assert proc.returncode == 0, "%s\n--- stdout\n%s--- stderr\n%s" % (
        command, proc.stdout, proc.stderr)
    return proc.stdout


def test_readme_gives_three_steps():
    steps = next_steps()
    assert len(steps) == 3, steps
    assert "build/examples/gpumem-quickstart" in steps[0], steps
    assert "examples/python_logical_devices.py" in steps[1], steps
    assert "build/tools/gpumem-smi" in steps[2], steps


def test_the_c_example():
    out = run_step(next_steps()[0])
    assert "as expected: gpumem_set_memory_growth(GPU:1)" in out, out
    assert "released 256 MiB to the GPU" in out, out


def test_the_python_example():
    out = run_step(next_steps()[1])
    assert "1 Physical GPU, 3 Logical GPUs" in out and "read back intact" in out, out


def test_gpumem_smi_shows_the_process_on_the_shared_gpu():
    out = run_step(next_steps()[2])
    rows = [line.split() for line in out.splitlines() if "/device:GPU:0" in line]
    # PID USER COMMAND DEVICE POLICY LIMIT RESERVED IN-USE ...: one process, the
    # python3 that holds 3 GiB
    assert len(rows) == 1 and rows[0][2] == "python3", out
    assert rows[0][9:11] == ["3.00", "GiB"], out
    assert "12.00 GiB total" in out and "no ledger" not in out, out
