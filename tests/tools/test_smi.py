"""gpumem-smi against real processes: stand-ins (ledger_writer) claim slots in
the ledgers of two simulated GPUs shared through GPUMEM_SIM_MACHINE and publish
figures; gpumem-smi --json must show each process's figures, the driver's free
memory, the memory outside gpumem pools (total - free - reserved), and drop a
killed process. Also its exit statuses: no ledger (3), no GPU (2), a bad
argument (1). usage: test_smi.py GPUMEM_SMI LEDGER_WRITER"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile

SMI, WRITER = sys.argv[1], sys.argv[2]
MiB, GiB = 1 << 20, 1 << 30
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def smi(env, *args):
    return subprocess.run([SMI, *args], env=env, capture_output=True, text=True,
                          timeout=60)


def writer(env, ledgers, gpu, *figures):
    p = subprocess.Popen([WRITER, ledgers, str(gpu), *figures], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    assert line and line[0] == "ready", f"writer {figures} did not start"
    return p, line[1]


def main():
    machine = f"smi{os.getpid()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUMEM_")}
    env.update(GPUMEM_BACKEND="sim", GPUMEM_SIM_DEVICES="Card A:4GiB:9.0,Card B:8GiB",
               GPUMEM_SIM_MACHINE=machine)
    procs = []
    with tempfile.TemporaryDirectory() as ledgers:
        try:
            # no process shares the GPUs yet: the GPUs, and exit status 3
            r = smi(env, "--json", "--ledger-dir", ledgers)
            check(r.returncode == 3, f"no ledger: exit {r.returncode}")
            check("no ledger" in r.stderr, f"no ledger message: {r.stderr!r}")
            out = json.loads(r.stdout)
            check([g["model"] for g in out["gpus"]] == ["Card A", "Card B"], "models")
            check(all(g["processes"] == [] for g in out["gpus"]), "no processes")
            # GPUMEM_LEDGER_DIR names the folder as for the runtime, parsed by the
            # same table (lib/option_vars.h), bad values refused with its words
            # the table says it, once, under the GPUs (standard error is empty)
            r = smi(dict(env, GPUMEM_LEDGER_DIR=ledgers))
            check(r.returncode == 3 and f"looked for in {ledgers})" in r.stdout
                  and (r.stdout + r.stderr).count("no ledger") == 1 and r.stderr == "",
                  f"GPUMEM_LEDGER_DIR, no ledger: {r.returncode} {r.stdout!r} {r.stderr!r}")
            for bad, words in (("", "GPUMEM_LEDGER_DIR: empty; unset it for /dev/shm"),
                               ("/x" * 600, "paths of at most 1023 bytes")):
                r = smi(dict(env, GPUMEM_LEDGER_DIR=bad), "--json")
                check(r.returncode == 1 and r.stderr.startswith("gpumem-smi: ")
                      and words in r.stderr, f"GPUMEM_LEDGER_DIR={bad[:8]!r}: "
                      f"{r.returncode} {r.stderr!r}")

            a, uuid0 = writer(env, ledgers, 0, "0:growth:%d:%d:%d:%d"
                              % (2 * GiB, 1 * GiB, 600 * MiB, 800 * MiB),
                              "1:greedy:0:%d:0:0" % (512 * MiB))
            b, uuid0b = writer(env, ledgers, 0, "--outside", str(300 * MiB),
                               "0:greedy:%d:%d:%d:%d"
                               % (256 * MiB, 256 * MiB, 256 * MiB, 256 * MiB))
            c, uuid1 = writer(env, ledgers, 1, "0:growth:0:%d:%d:%d"
                              % (2 * GiB, 1 * GiB, 3 * GiB // 2))
            procs = [a, b, c]
            check(uuid0 == uuid0b and uuid0 != uuid1 and uuid0.startswith("GPU-"),
                  f"UUIDs {uuid0} {uuid0b} {uuid1}")

            r = smi(env, "--json", "--ledger-dir", ledgers)
            check(r.returncode == 0, f"exit {r.returncode}: {r.stderr}")
            out = json.loads(r.stdout)
            g0, g1 = out["gpus"]
            check(g0["uuid"] == uuid0 and g1["uuid"] == uuid1, "uuids in the output")
            check(g0["total_bytes"] == 4 * GiB and g1["total_bytes"] == 8 * GiB, "totals")
            # the driver's free memory: what every process took, pools or not
            check(g0["free_bytes"] == 4 * GiB - (1 * GiB + 512 * MiB + 256 * MiB + 300 * MiB),
                  f"free {g0['free_bytes']}")
            check(g0["outside_pools_bytes"] == 300 * MiB,
                  f"outside {g0['outside_pools_bytes']}")
            check(g1["free_bytes"] == 6 * GiB and g1["outside_pools_bytes"] == 0, "GPU 1")
            by_pid = {p["pid"]: p for p in g0["processes"]}
            check(set(by_pid) == {a.pid, b.pid}, f"pids {set(by_pid)}")
            pa = by_pid.get(a.pid, {"logical_devices": []})
            check(pa.get("command") == "ledger_writer", f"command {pa.get('command')}")
            check(pa.get("user") not in (None, ""), "user")
            devs = pa["logical_devices"]
            check(len(devs) == 2, f"devices {devs}")
            if len(devs) == 2:
                check(devs[0] == {"name": "logical 0", "policy": "growth",
                                  "limit_bytes": 2 * GiB, "reserved_bytes": 1 * GiB,
                                  "in_use_bytes": 600 * MiB, "cached_bytes": 424 * MiB,
                                  "peak_bytes": 800 * MiB}, f"device 0: {devs[0]}")
                check(devs[1]["policy"] == "greedy" and devs[1]["limit_bytes"] == 0 and
                      devs[1]["reserved_bytes"] == 512 * MiB, f"device 1: {devs[1]}")
            check([p["pid"] for p in g1["processes"]] == [c.pid], "GPU 1's process")

            # the variable finds them; --ledger-dir wins over it
            for extra, args in (({"GPUMEM_LEDGER_DIR": ledgers}, ()),
                                ({"GPUMEM_LEDGER_DIR": "/nonexistent-gpumem"},
                                 ("--ledger-dir", ledgers))):
                r = smi(dict(env, **extra), "--json", *args)
                check(r.returncode == 0 and
                      {p["pid"] for p in json.loads(r.stdout)["gpus"][0]["processes"]}
                      == {a.pid, b.pid}, f"{extra} {args}: {r.returncode} {r.stderr!r}")

            # the table says the same in words
            r = smi(env, "--ledger-dir", ledgers)
            check(r.returncode == 0 and str(a.pid) in r.stdout and "growth" in r.stdout
                  and "outside gpumem pools" in r.stdout, f"table: {r.stdout}")

            # --watch repeats: two rounds in 1.5 s at 1 s
            p = subprocess.Popen([SMI, "--json", "--watch", "1", "--ledger-dir", ledgers],
                                 env=env, stdout=subprocess.PIPE, text=True)
            first = p.stdout.readline()
            second = p.stdout.readline()
            p.kill()
            p.wait()
            check(json.loads(first)["gpus"] and json.loads(second)["gpus"], "watch")

            # hostile bytes (issue 33, item 4): a process renamed "bad\xff" and one
            # whose name is an escape sequence, a device name with control bytes
            # and invalid UTF-8: the JSON is valid UTF-8 (a bad byte is U+FFFD) and
            # the table has no control character
            d, _ = writer(env, ledgers, 1, "--comm-hex", b"bad\xff".hex())
            e, _ = writer(env, ledgers, 1, "--comm-hex", b"\x1b[31mred\x9b2J".hex(),
                          "--name-hex", "0:" + b"\x1b]0;x\x07\xfe\xc2\x9b".hex())
            procs += [d, e]
            r = subprocess.run([SMI, "--json", "--ledger-dir", ledgers], env=env,
                               capture_output=True, timeout=60)
            try:
                out = json.loads(r.stdout.decode("utf-8"))
                names = {p["pid"]: p for p in out["gpus"][1]["processes"]}
                check(names[d.pid]["command"] == "bad\ufffd",
                      f"bad\\xff: {names[d.pid]['command']!r}")
                check(names[e.pid]["command"] == "\x1b[31mred\ufffd2J",
                      f"escape: {names[e.pid]['command']!r}")
                check(names[e.pid]["logical_devices"][0]["name"]
                      == "\x1b]0;x\x07\ufffd\u009b", "device name")
            except (UnicodeDecodeError, ValueError, KeyError, IndexError) as x:
                check(False, f"--json with hostile names: {x!r}: {r.stdout!r}")
            r = subprocess.run([SMI, "--ledger-dir", ledgers], env=env,
                               capture_output=True, timeout=60)
            table = r.stdout
            check(r.returncode == 0, f"table exit {r.returncode}")
            check(not any(c < 0x20 and c != 0x0a or c == 0x7f for c in table),
                  f"control bytes in the table: {table!r}")
            try:
                text = table.decode("utf-8")
                check("\u009b" not in text and "bad?" in text and "?[31mred?2J" in text,
                      f"table: {text!r}")
            except UnicodeDecodeError as x:
                check(False, f"the table is not UTF-8: {x!r}")
            for p in (d, e):
                p.stdin.close()
                p.wait(timeout=30)

            # ledgers are per user (issue 33): as root, a process of another user
            # ("nobody") has a ledger of its own, which root's gpumem-smi shows
            # beside root's; "nobody"'s shows its own and says it may not read
            # root's. The folder is made like /dev/shm (sticky, open to all).
            if os.geteuid() == 0:
                os.chmod(ledgers, 0o1777)

                def as_nobody():
                    os.setgid(65534)
                    os.setuid(65534)

                p = subprocess.Popen([WRITER, ledgers, "1", "0:growth:0:%d:0:0" % MiB],
                                     env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     preexec_fn=as_nobody)
                procs.append(p)
                check(p.stdout.readline().startswith("ready"), "nobody's writer")
                names = os.listdir(ledgers)
                check(any(n.endswith(".u65534.ledger") for n in names)
                      and any(n.endswith(".u0.ledger") for n in names),
                      f"one ledger per user: {names}")
                out = json.loads(smi(env, "--json", "--ledger-dir", ledgers).stdout)
                g1 = out["gpus"][1]
                check({q["pid"] for q in g1["processes"]} == {c.pid, p.pid}
                      and g1["unreadable_ledgers"] == 0, f"root sees both: {g1}")
                r = subprocess.run([SMI, "--json", "--ledger-dir", ledgers], env=env,
                                   capture_output=True, text=True, timeout=60,
                                   preexec_fn=as_nobody)
                g1 = json.loads(r.stdout)["gpus"][1]
                check([q["pid"] for q in g1["processes"]] == [p.pid]
                      and g1["unreadable_ledgers"] == 1, f"nobody sees its own: {g1}")
                p.stdin.close()
                p.wait(timeout=30)

            # a killed process leaves the ledger and the driver's count
            b.send_signal(signal.SIGKILL)
            b.wait()
            out = json.loads(smi(env, "--json", "--ledger-dir", ledgers).stdout)
            g0 = out["gpus"][0]
            check([p["pid"] for p in g0["processes"]] == [a.pid], "killed one is gone")
            check(g0["free_bytes"] == 4 * GiB - (1 * GiB + 512 * MiB)
                  and g0["outside_pools_bytes"] == 0, f"after the kill: {g0}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.stdin.close()
                    p.wait(timeout=30)
            for f in glob.glob(f"/dev/shm/gpumem-sim-{machine}*"):
                os.unlink(f)

    r = smi(dict(env, GPUMEM_SIM_DEVICES="", GPUMEM_SIM_MACHINE=machine + "x"), "--json")
    check(r.returncode == 2 and "no GPU" in r.stderr, f"no GPU: {r.returncode} {r.stderr}")
    for f in glob.glob(f"/dev/shm/gpumem-sim-{machine}x*"):
        os.unlink(f)
    # simulated GPUs of its own (no GPUMEM_SIM_MACHINE), as right after the demo:
    # the one sentence names what would show processes
    own = {k: v for k, v in env.items() if k != "GPUMEM_SIM_MACHINE"}
    for args, said in (((), "stdout"), (("--json",), "stderr")):
        r = smi(own, *args)
        text = r.stdout + r.stderr
        check(r.returncode == 3 and text.count("no ledger") == 1
              and "GPUMEM_SIM_MACHINE=NAME" in getattr(r, said)
              and "these simulated GPUs are gpumem-smi's own" in getattr(r, said),
              f"own simulated GPUs {args}: {r.returncode} {r.stdout!r} {r.stderr!r}")
    # a folder of many names shorter than a ledger's: each is told apart by its
    # prefix before anything past its end is read (the ASan stage once found the
    # digits read past a short name at the end of readdir's buffer, in /dev/shm)
    with tempfile.TemporaryDirectory() as crowded:
        for i in range(3000):
            open(os.path.join(crowded, f"x{i}"), "w").close()
        r = smi(env, "--json", "--ledger-dir", crowded)
        check(r.returncode == 3 and "no ledger" in r.stderr,
              f"a folder of short names: {r.returncode} {r.stderr!r}")
    r = smi(env, "--watch", "0")
    check(r.returncode == 1 and "usage" in r.stderr, "a bad argument")
    for f in glob.glob(f"/dev/shm/gpumem-sim-{machine}*"):
        os.unlink(f)
    print("gpumem-smi:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
