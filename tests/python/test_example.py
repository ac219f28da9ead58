"""examples/python_logical_devices.py runs and tells its story."""

import os
import subprocess
import sys

from conftest import ROOT, scenario_env


def test_python_logical_devices_example():
    env = scenario_env("12GiB")
    del env["GPUMEM_SIM_DEVICES"], env["GPUMEM_BACKEND"], env["PYTHONPATH"]  # it sets them
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "python_logical_devices.py")],
        env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "1 Physical GPU, 3 Logical GPUs" in out, out
    assert "read back intact" in out, out
    assert "/device:GPU:1  current   64 MiB  peak   64 MiB  reserved   64 MiB  limit 2048 MiB" in out
    assert "release_unused gave back 64 MiB" in out, out
