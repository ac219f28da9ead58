"""gpumem-smi against real gpumem processes (runtime_holder): two processes on a
simulated GPU shared through GPUMEM_SIM_MACHINE, one greedy with a fraction and
one growing that caches what it freed, their ledger in a folder of this test's
own named by GPUMEM_LEDGER_DIR (which gpumem-smi reads too). gpumem-smi --json
must agree with what each process's gpumem_get_memory_info says: the logical
device's name, policy, limit (none for growth without one), reserved, in use
and peak; and a process that ends must leave the table.
usage: test_smi_runtime.py GPUMEM_SMI RUNTIME_HOLDER"""
import json
import os
import subprocess
import sys
import tempfile

SMI, HOLDER = sys.argv[1], sys.argv[2]
MiB = 1 << 20
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def holder(env, *sizes):
    p = subprocess.Popen([HOLDER, *map(str, sizes)], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    words = p.stdout.readline().split()
    assert words and words[0] == "ready", f"holder {sizes} did not start"
    name, limit, reserved, in_use, peak = words[1:6]
    return p, {"name": name, "limit_bytes": int(limit), "reserved_bytes": int(reserved),
               "in_use_bytes": int(in_use), "peak_bytes": int(peak)}


def smi(env):
    r = subprocess.run([SMI, "--json"], env=env, capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, f"gpumem-smi exit {r.returncode}: {r.stderr!r}")
    return json.loads(r.stdout)


def main():
    machine = f"smirt{os.getpid()}"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPUMEM_", "TF_"))}
    procs = []
    with tempfile.TemporaryDirectory() as ledgers:
        env.update(GPUMEM_BACKEND="sim", GPUMEM_SIM_DEVICES="TITAN X:12GiB:6.1",
                   GPUMEM_SIM_MACHINE=machine, GPUMEM_LEDGER_DIR=ledgers)
        try:
            greedy_env = dict(env, GPUMEM_MEMORY_FRACTION="0.3")
            a, a_info = holder(greedy_env, 100, 200, -1)
            growth_env = dict(env, GPUMEM_FORCE_ALLOW_GROWTH="true")
            b, b_info = holder(growth_env, 500, 300, -2)
            procs = [a, b]
            out = smi(env)
            check(len(out["gpus"]) == 1, "one GPU")
            gpu = out["gpus"][0]
            check(gpu["ledger"] is True, "the GPU has its ledger")
            by_pid = {p["pid"]: p for p in gpu["processes"]}
            check(set(by_pid) == {a.pid, b.pid}, f"processes {sorted(by_pid)}")
            for proc, info, policy, limit in ((a, a_info, "greedy", a_info["limit_bytes"]),
                                              (b, b_info, "growth", 0)):
                devs = by_pid.get(proc.pid, {}).get("logical_devices", [])
                check(len(devs) == 1, f"pid {proc.pid}: {len(devs)} logical devices")
                if not devs:
                    continue
                d = devs[0]
                check(d["name"] == info["name"] == "/device:GPU:0", f"name {d['name']}")
                check(d["policy"] == policy, f"pid {proc.pid}: policy {d['policy']}")
                check(d["limit_bytes"] == limit, f"pid {proc.pid}: limit {d}")
                for key in ("reserved_bytes", "in_use_bytes", "peak_bytes"):
                    check(d[key] == info[key],
                          f"pid {proc.pid}: {key} {d[key]} != {info[key]} (memory info)")
                check(d["cached_bytes"] == info["reserved_bytes"] - info["in_use_bytes"],
                      f"pid {proc.pid}: cached {d['cached_bytes']}")
            check(a_info["in_use_bytes"] == 200 * MiB and a_info["peak_bytes"] == 300 * MiB,
                  f"greedy figures {a_info}")
            check(b_info["in_use_bytes"] == 500 * MiB
                  and b_info["reserved_bytes"] >= 800 * MiB, f"growth figures {b_info}")
            # a process that ends leaves the table
            a.stdin.close()
            a.wait(timeout=60)
            out = smi(env)
            pids = [p["pid"] for p in out["gpus"][0]["processes"]]
            check(pids == [b.pid], f"after the greedy one ended: {pids}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.stdin.close()
                    p.wait(timeout=60)
            for name in (f"gpumem-sim-{machine}.machine",
                         f"gpumem-sim-{machine}-0.u{os.geteuid()}.ledger"):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except FileNotFoundError:
                    pass
    if failures:
        print(f"test_smi_runtime: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("test_smi_runtime: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
