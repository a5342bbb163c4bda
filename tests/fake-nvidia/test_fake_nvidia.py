#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""test_fake_nvidia.py — the fake NVIDIA tools replay their recordings byte for byte,
follow the state helpers, and every scenario names recordings that exist. The CSV the
fake composes for --query-gpu (header, units, nounits, separators) is the real one: asked
a recorded query-gpu command, a scenario made of that recording alone answers exactly
the recorded bytes."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

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
                if key == "list":
                    # The recording, then a plain line per scenario GPU it does not list.
                    check(r.stdout.startswith(recorded(sc[key])), "%s %s: not the recording" % (name, args))
                else:
                    check(r.stdout == recorded(sc[key]), "%s %s: not the recording" % (name, args))
            if "error" in sc:
                r = run(SMI, ["-L"], env)
                check(r.returncode == sc["error"]["exit"], "%s: exit %d" % (name, r.returncode))
                check(r.stdout == recorded(sc["error"]["file"]), "%s: not the error recording" % name)

        # -L of a scenario with a GPU its recording lacks: that GPU's plain line follows.
        env = fake_nvidia.test_env("h100-mig-and-h100", tmp)
        r = run(SMI, ["-L"], env)
        check(r.returncode == 0 and r.stdout == recorded("L-H100-MIG-1.txt") +
              b"GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000001-0000-0000-0000-000000000001)\n",
              "-L with a composed GPU: %r" % r.stdout[-200:])

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

        # MPS: a real daemon; the answers of the recordings made on an H100, on the
        # streams they came on; limits land in the state, every stdin line in the log.
        pipe = os.path.join(tmp, "pipe-0")
        os.mkdir(pipe)
        env["CUDA_MPS_PIPE_DIRECTORY"] = pipe
        env["CUDA_MPS_LOG_DIRECTORY"] = tmp
        r = run(MPS, [], env, stdin=b"get_server_list\n")
        check(r.returncode == 1 and r.stdout == b"" and r.stderr == recorded("mps-H100-no-daemon-1.txt"),
              "no daemon: %r" % (r,))
        r = run(MPS, ["-d"], env)
        check(r.returncode == 0 and r.stdout == b"" and r.stderr == b"", "mps -d: %r" % (r,))
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid")) as f:
            pid = int(f.read())
        check(os.path.exists("/proc/%d" % pid), "the daemon %d runs after -d returned" % pid)
        r = run(MPS, ["-d"], env)
        check(r.returncode == 1 and r.stdout == recorded("mps-H100-already-running-1.txt"), "second -d: %r" % (r,))
        r = run(MPS, [], env, stdin=b"set_default_device_pinned_mem_limit 0 4096M\nget_server_list\n")
        check(r.returncode == 0 and r.stdout == recorded("mps-H100-set-limit-1.txt"), "mps commands: %r" % r.stdout)
        r = run(MPS, [], env, stdin=b"get_default_device_pinned_mem_limit 0\n")
        check(r.stdout == recorded("mps-H100-get-limit-1.txt"), "get limit: %r" % r.stdout)
        for value, rec in (("8", "mps-H100-set-percentage-1.txt"), ("33.5", "mps-H100-set-percentage-2.txt"),
                           ("0", "mps-H100-set-percentage-3.txt")):
            r = run(MPS, [], env, stdin=b"set_default_active_thread_percentage %s\n" % value.encode())
            check(r.returncode == 0 and r.stdout == recorded(rec), "percentage %s: %r" % (value, r.stdout))
        r = run(MPS, [], env, stdin=b"bogus_cmd\n")
        check(r.returncode == 0 and r.stdout == recorded("mps-H100-unknown-command-1.txt"), "unknown: %r" % r.stdout)
        st = fake_nvidia.read_state(tmp)["mps"][pipe]
        check(st["running"] and st["pid"] == pid and st["pinned_mem_limit"] == {"0": "4096M"}
              and st["active_thread_percentage"] == "33.5", "mps state: %r" % st)
        log = fake_nvidia.read_commands(tmp)
        check("nvidia-cuda-mps-control < set_default_device_pinned_mem_limit 0 4096M" in log, "mps log: %r" % log)
        with open(os.path.join(tmp, "control.log")) as f:
            check("Starting control daemon using socket %s/control" % pipe in f.read(), "control.log")
        check(run(MPS, [], env, stdin=b"quit\n").returncode == 0, "mps quit")
        for _ in range(100):
            if not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
        check(not os.path.exists("/proc/%d" % pid), "the daemon is gone after quit")
        check(sorted(os.listdir(pipe)) == ["control", "control_lock"], "left after quit: %r" % os.listdir(pipe))
        r = run(MPS, [], env, stdin=b"get_server_list\n")
        check(r.returncode == 1 and r.stderr == recorded("mps-A100-Polaris-1.txt"), "after quit: %r" % (r,))

        # -f: the same daemon in the foreground, its log on stdout; a SIGKILL is the end
        # of it (no quit: its pid file stays, and clients find nobody).
        fg = subprocess.Popen([MPS, "-f"], env=dict(os.environ, **env), stdout=subprocess.PIPE)
        for _ in range(100):
            if run(MPS, [], env, stdin=b"get_server_list\n").returncode == 0:
                break
            time.sleep(0.05)
        with open(os.path.join(pipe, "nvidia-cuda-mps-control.pid")) as f:
            check(int(f.read()) == fg.pid, "-f: the pid file names the foreground process")
        fg.kill()
        out = fg.communicate(timeout=10)[0]
        check(b"Starting control daemon using socket" in out, "-f logs on stdout: %r" % out)
        r = run(MPS, [], env, stdin=b"get_server_list\n")
        check(r.returncode == 1 and r.stderr == recorded("mps-H100-no-daemon-1.txt"), "killed: %r" % (r,))

        # Without a scenario: a complaint on stderr, never invented output.
        r = run(SMI, ["-L"], {"KGPU_FAKE_NVIDIA_SCENARIO": ""})
        check(r.returncode == 255 and r.stdout == b"" and b"SCENARIO" in r.stderr, "no scenario: %r" % r.stderr)

    # The composed CSV against every recorded query with a header row (its own scenario).
    replayed = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "scenarios"))
        for path in sorted(glob.glob(os.path.join(HERE, "..", "data", "nvidia", "query-gpu-*.txt"))):
            name = os.path.basename(path)
            with open(path, "rb") as f:
                command = f.read().split(b"\n", 2)[1].decode()
            q = re.search(r"(--query-gpu=\S+)", command)
            fmt = re.search(r"(--format=csv[a-z,]*)", command)
            only = re.search(r" -i (\d+) ", command)
            if not q or not fmt or "noheader" in fmt.group(1):
                continue
            shutil.copy(path, os.path.join(tmp, name))
            with open(os.path.join(tmp, "scenarios", "q.json"), "w") as f:
                json.dump({"query_gpu": name}, f)
            args = (["-i", only.group(1)] if only else []) + [q.group(1), fmt.group(1)]
            r = run(SMI, args, {"KGPU_FAKE_NVIDIA_SCENARIO": "q", "KGPU_FAKE_NVIDIA_DATA": tmp})
            want = recorded(name)
            if not want.endswith(b"\n"):
                want += b"\n"      # a test fixture saved without it; nvidia-smi ends each row
            check(r.returncode == 0, "%s: exit %d %r" % (name, r.returncode, r.stderr))
            check(r.stdout == want, "%s: composed CSV is not the recording:\n%r\n%r" % (name, r.stdout, want))
            replayed += 1
    check(replayed >= 5, "only %d query-gpu recordings replayed" % replayed)

    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
