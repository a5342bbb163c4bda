#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""test_fake_nvidia.py — the fake NVIDIA tools replay their recordings byte for byte,
follow the state helpers, and every scenario names recordings that exist."""

import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fake_nvidia  # noqa: E402

SMI = os.path.join(HERE, "nvidia-smi")
MPS = os.path.join(HERE, "nvidia-cuda-mps-control")
SCENARIOS = os.path.join(HERE, "..", "data", "nvidia", "scenarios")


def recorded(name):
    """The output part of a recording, read independently of fake_nvidia."""
    with open(os.path.join(HERE, "..", "data", "nvidia", name), "rb") as f:
        return f.read().split(b"\n", 2)[2]


def run(tool, args, env, stdin=None):
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([tool] + args, env=e, input=stdin, capture_output=True, timeout=30)


def main():
    failures = 0

    def check(cond, what):
        nonlocal failures
        if not cond:
            print("FAIL:", what)
            failures += 1

    names = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(SCENARIOS, "*.json")))
    check(len(names) >= 6, "scenarios found: %s" % names)
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            with open(os.path.join(SCENARIOS, name + ".json")) as f:
                sc = json.load(f)
            env = fake_nvidia.test_env(name, tmp)
            for key, args in (("list", ["-L"]), ("topo", ["topo", "-m"]), ("q", ["-q"]), ("summary", []),
                              ("mig_lgi", ["mig", "-lgi"]), ("mig_lci", ["mig", "-lci"]),
                              ("mig_lgip", ["mig", "-lgip"])):
                if not sc.get(key):
                    continue
                r = run(SMI, args, env)
                check(r.returncode == 0, "%s %s: exit %d" % (name, args, r.returncode))
                check(r.stdout == recorded(sc[key]), "%s %s: not the recording" % (name, args))
            if "error" in sc:
                r = run(SMI, ["-L"], env)
                check(r.returncode == sc["error"]["exit"], "%s: exit %d" % (name, r.returncode))
                check(r.stdout == recorded(sc["error"]["file"]), "%s: not the error recording" % name)

        # Lost GPUs through the state file, then back.
        env = fake_nvidia.test_env("8xh100-nvlink", tmp)
        fake_nvidia.set_lost(tmp, [2])
        r = run(SMI, ["--query-gpu=index,pci.bus_id", "--format=csv,noheader"], env)
        check(r.returncode == 15, "lost: exit %d" % r.returncode)
        check(b"Unable to determine the device handle for GPU0000:3A:00.0: Unknown Error\n" in r.stdout,
              "lost: %r" % r.stdout)
        check(r.stdout.count(b"\n") == 8, "lost: 7 rows + 1 error line")
        fake_nvidia.set_lost(tmp, [])
        r = run(SMI, ["--query-gpu=index", "--format=csv,noheader"], env)
        check(r.returncode == 0 and r.stdout == b"".join(b"%d\n" % i for i in range(8)), "recovered: %r" % r.stdout)

        # MPS: limits land in the state, every stdin line in the log.
        env["CUDA_MPS_PIPE_DIRECTORY"] = os.path.join(tmp, "pipe-0")
        check(run(MPS, ["-d"], env).returncode == 0, "mps -d")
        r = run(MPS, [], env, stdin=b"set_default_device_pinned_mem_limit 0 4096M\nget_server_list\n")
        check(r.returncode == 0 and r.stdout == b"", "mps commands: %r" % r.stdout)
        st = fake_nvidia.read_state(tmp)["mps"][env["CUDA_MPS_PIPE_DIRECTORY"]]
        check(st["running"] and st["pinned_mem_limit"] == {"0": "4096M"}, "mps state: %r" % st)
        log = fake_nvidia.read_commands(tmp)
        check("nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 4096M" in log, "mps log: %r" % log)
        check(run(MPS, [], env, stdin=b"quit\n").returncode == 0, "mps quit")
        r = run(MPS, [], env, stdin=b"get_server_list\n")
        check(r.returncode == 1 and r.stdout == recorded("mps-A100-Polaris-1.txt"), "after quit")

        # Without a scenario: a complaint on stderr, never invented output.
        r = run(SMI, ["-L"], {"KGPU_FAKE_NVIDIA_SCENARIO": ""})
        check(r.returncode == 255 and r.stdout == b"" and b"SCENARIO" in r.stderr, "no scenario: %r" % r.stderr)

    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
