"""run.sh's front door: before it builds anything, a command works out every
Debian package it needs; when they cannot be installed it names them all in
one sentence and stops. run.sh runs here from a copy in a temporary folder,
with a PATH of a few chosen tools (no meson, ninja, pkg-config, C compiler or
sudo), pytest hidden, and RUNSH_TEST_EUID (run.sh's switch for these tests)
choosing whether it acts as root. apt-get, when there is one, is a stand-in
that records its calls and installs nothing, so no test can change the
machine."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

ALL = "meson ninja-build pkg-config gcc"
APT_GET = """#!/bin/sh
echo "$*" >>"$(dirname "$0")/../apt-get.calls"
case "$*" in *install*) echo "E: Unable to locate package meson" >&2; exit 100 ;; esac
"""


@pytest.fixture
def sandbox(tmp_path):
    """A copy of run.sh (with one Python test, so that `test` needs pytest), a
    bin folder for PATH, and a PYTHONPATH folder whose pytest cannot be imported."""
    shutil.copy(os.path.join(ROOT, "run.sh"), tmp_path / "run.sh")
    (tmp_path / "tests" / "python").mkdir(parents=True)
    (tmp_path / "tests" / "python" / "test_x.py").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "env", "nproc", "id"):
        found = shutil.which(tool)
        if found is None:
            pytest.skip("%s is not installed" % tool)
        os.symlink(found, bin_dir / tool)
    os.symlink(sys.executable, bin_dir / "python3")
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "pytest.py").write_text("raise ImportError('hidden by test_run_sh')\n")
    return tmp_path


def add_apt_get(sandbox):
    path = sandbox / "bin" / "apt-get"
    path.write_text(APT_GET)
    path.chmod(0o755)


def run_sh(sandbox, command, euid):
    env = {"PATH": str(sandbox / "bin"), "PYTHONPATH": str(sandbox / "hide"),
           "RUNSH_TEST_EUID": str(euid), "HOME": str(sandbox)}
    proc = subprocess.run([str(sandbox / "bin" / "bash"), str(sandbox / "run.sh"), command],
                          env=env, cwd=str(sandbox), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60)
    assert not (sandbox / "build").exists(), "run.sh began to build"
    return proc


def apt_calls(sandbox):
    path = sandbox / "apt-get.calls"
    return path.read_text().splitlines() if path.exists() else []


def assert_one_sentence(stderr, sentence):
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines == [sentence], stderr


@pytest.mark.parametrize("command, packages", [("demo", ALL),
                                               ("test", ALL + " python3-pytest")])
def test_not_root_and_no_sudo_names_every_package_once(sandbox, command, packages):
    add_apt_get(sandbox)
    proc = run_sh(sandbox, command, 1000)
    assert proc.returncode != 0
    assert_one_sentence(proc.stderr,
                        "run.sh needs these Debian packages: %s; ask an administrator to "
                        "install them (apt-get install %s)." % (packages, packages))
    assert apt_calls(sandbox) == []
    # .ci/run's last line, for test; nothing at all for demo
    assert proc.stdout == ("0 passed, 1 failed\n" if command == "test" else "")


def test_no_apt_get_says_so(sandbox):
    proc = run_sh(sandbox, "demo", 1000)
    assert proc.returncode != 0
    assert_one_sentence(proc.stderr,
                        "run.sh needs these Debian packages: %s; this system has no apt-get, "
                        "so install them (or its own packages of the same tools) yourself."
                        % ALL)


def test_as_root_everything_is_asked_of_apt_get_in_one_install(sandbox):
    add_apt_get(sandbox)
    proc = run_sh(sandbox, "test", 0)
    assert proc.returncode != 0
    packages = ALL + " python3-pytest"
    assert apt_calls(sandbox) == ["update -qq", "install -y -qq " + packages]
    assert proc.stdout.splitlines() == ["==> installing %s with apt-get" % packages,
                                        "0 passed, 1 failed"]
    # apt-get's own words, then run.sh's one sentence
    assert proc.stderr.splitlines() == [
        "E: Unable to locate package meson",
        "run.sh needs these Debian packages: %s; apt-get could not install them (see "
        "above): install them, or ask an administrator to (apt-get install %s)."
        % (packages, packages)]
