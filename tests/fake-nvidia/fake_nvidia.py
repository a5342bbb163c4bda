# SPDX-License-Identifier: LGPL-2.1-or-later
"""fake_nvidia.py — fake nvidia-smi and nvidia-cuda-mps-control for tests.

They replay real output recorded in tests/data/nvidia/ (see its README), chosen by a
scenario, log every command they receive, and keep the state a command changes
(compute mode, MPS daemons and their limits, lost GPUs) in a JSON file, so a test can
assert which modes and limits were set.

Environment (all optional except the scenario):
  KGPU_FAKE_NVIDIA_SCENARIO  scenario name: tests/data/nvidia/scenarios/<name>.json
  KGPU_FAKE_NVIDIA_DATA      data directory (default: ../data/nvidia next to this file)
  KGPU_FAKE_NVIDIA_LOG       file that gets one line per command:
                               nvidia-smi <args, shell-quoted>
                               nvidia-cuda-mps-control <args> [CUDA_MPS_PIPE_DIRECTORY=...]
                               nvidia-cuda-mps-control < <one stdin line>
  KGPU_FAKE_NVIDIA_STATE     state file (JSON); default: no state is kept between calls
  KGPU_FAKE_NVIDIA_LOST      comma-separated GPU indices that are "lost" (overrides the
                             state file's "lost" list)
  KGPU_FAKE_NVIDIA_DELAY     seconds to sleep before answering (runner timeout tests)

State file: {"compute_mode": {"<index>": "Exclusive_Process"}, "lost": [1],
             "mps": {"<pipe dir>": {"running": true, "pid": 1234, "visible": "...",
                     "pinned_mem_limit": {"<dev>": "2048M"}, "active_thread_percentage": "50.0"}}}
(the MPS entries mirror what each fake daemon holds, written by the daemon itself)

Exit codes follow nvidia-smi(1): 0 success, 2 invalid argument, 6 query unsuccessful
("No devices were found"), 9 driver not loaded, 15 GPU fallen off the bus / lost,
255 other error (also: this scenario has no recording for the command).
"""

import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Units nvidia-smi prints for the fields the probe queries (header "[unit]", value suffix),
# for scenarios without a recorded CSV header; a recorded header's units take precedence.
UNITS = {"memory.total": "MiB", "memory.used": "MiB", "memory.free": "MiB", "memory.reserved": "MiB"}

COMPUTE_MODES = {"0": "Default", "DEFAULT": "Default", "1": "Exclusive_Thread", "EXCLUSIVE_THREAD": "Exclusive_Thread",
                 "2": "Prohibited", "PROHIBITED": "Prohibited", "3": "Exclusive_Process",
                 "EXCLUSIVE_PROCESS": "Exclusive_Process"}


class Fail(Exception):
    def __init__(self, text, code):
        super().__init__(text)
        self.text = text
        self.code = code


def data_dir():
    return os.environ.get("KGPU_FAKE_NVIDIA_DATA") or os.path.join(HERE, "..", "data", "nvidia")


def recording(name):
    """The raw output of a recording: everything after its two '# ' note lines."""
    with open(os.path.join(data_dir(), name), "rb") as f:
        raw = f.read()
    for _ in range(2):
        assert raw.startswith(b"# "), name
        raw = raw[raw.index(b"\n") + 1:]
    return raw


def log(line):
    path = os.environ.get("KGPU_FAKE_NVIDIA_LOG")
    if not path:
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")


class State:
    """The JSON state file, locked for the whole command."""

    def __init__(self):
        self.path = os.environ.get("KGPU_FAKE_NVIDIA_STATE")
        self.data = {}
        self.f = None
        if self.path:
            self.f = open(self.path, "a+")
            fcntl.flock(self.f, fcntl.LOCK_EX)
            self.f.seek(0)
            text = self.f.read()
            self.data = json.loads(text) if text.strip() else {}

    def save(self):
        if self.f:
            self.f.seek(0)
            self.f.truncate()
            json.dump(self.data, self.f, indent=1, sort_keys=True)
            self.f.flush()

    def close(self):
        if self.f:
            self.f.close()
            self.f = None

    def lost(self):
        env = os.environ.get("KGPU_FAKE_NVIDIA_LOST")
        if env is not None:
            return {int(x) for x in env.split(",") if x.strip()}
        return set(self.data.get("lost", []))


class Scenario:
    def __init__(self):
        name = os.environ.get("KGPU_FAKE_NVIDIA_SCENARIO")
        if not name or "/" in name:
            raise Fail("fake nvidia tools: KGPU_FAKE_NVIDIA_SCENARIO is not set\n", 255)
        with open(os.path.join(data_dir(), "scenarios", name + ".json")) as f:
            self.s = json.load(f)
        self.name = name
        self.units = dict(UNITS)
        self.gpus = self._gpus()

    def _gpus(self):
        """Field name -> value for each GPU: a recorded CSV row, then the scenario's values."""
        base = {}
        if "query_gpu" in self.s:
            lines = recording(self.s["query_gpu"]).decode().splitlines()
            header = [h.strip() for h in lines[0].split(",")]
            values = [v.strip() for v in lines[1].split(",")]
            assert len(header) == len(values)
            for h, v in zip(header, values):
                name, _, unit = h.partition(" [")
                base[name] = v
                if unit.endswith("]"):
                    self.units[name] = unit[:-1]
        gpus = []
        for i, g in enumerate(self.s.get("gpus", [{}])):
            d = dict(base)
            d.update(g)
            d.setdefault("index", str(i))
            gpus.append(d)
        return gpus

    def get(self, key):
        if key not in self.s:
            raise Fail("fake nvidia-smi: scenario %s has no recording for this command\n" % self.name, 255)
        return self.s[key]


def lost_line(gpu):
    # The newer form (no space before the bus id), as in error-A10-GPU-PV-VM-1.txt.
    return "Unable to determine the device handle for GPU%s: Unknown Error\n" % gpu["pci.bus_id"][4:]


def query_gpu(sc, st, fields, fmt, only):
    opts = set(fmt.split(","))
    if "csv" not in opts:
        raise Fail("ERROR: Option --format is missing its value. Please run 'nvidia-smi -h' for help.\n", 2)
    names = [f.strip() for f in fields.split(",")]
    out = []
    if "noheader" not in opts:
        out.append(", ".join(n + (" [%s]" % sc.units[n] if n in sc.units else "") for n in names) + "\n")
    code = 0
    for g in sc.gpus:
        if only is not None and g["index"] != only:
            continue
        if int(g["index"]) in st.lost():
            out.append(lost_line(g))
            code = 15
            continue
        row = []
        for n in names:
            if n == "compute_mode":
                v = st.data.get("compute_mode", {}).get(g["index"], g.get(n, "Default"))
            else:
                v = g.get(n)
            if v is None:
                raise Fail("Field \"%s\" is not a valid field to query.\n" % n, 2)
            unit = sc.units.get(n)
            if unit and "nounits" in opts and v.endswith(" " + unit):
                v = v[:-len(unit) - 1]
            elif unit and "nounits" not in opts and not v.endswith(" " + unit) and v[:1].isdigit():
                v = v + " " + unit
            row.append(v)
        out.append(", ".join(row) + "\n")
    return "".join(out), code


def list_gpus(sc, st):
    lost = st.lost()
    text = recording(sc.s["list"]).decode() if "list" in sc.s else ""
    # GPUs of the scenario the recording lacks get the plain line nvidia-smi -L prints.
    listed = {int(m.group(1)) for m in re.finditer(r"^GPU (\d+):", text, re.M)}
    text += "".join("GPU %s: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"])
                    for g in sc.gpus if int(g["index"]) not in listed)
    if not lost:
        return text, 0
    out, skip = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("GPU "):
            idx = int(line[4:line.index(":")])
            skip = idx in lost
            if skip:
                out.append(lost_line(sc.gpus[idx]))
                continue
        if not skip:
            out.append(line)
    return "".join(out), 15


def set_compute_mode(sc, st, mode, only):
    m = COMPUTE_MODES.get(mode.upper())
    if not m:
        raise Fail("Invalid compute mode value \"%s\". Please run 'nvidia-smi -h' for help.\n" % mode, 2)
    out = []
    for g in sc.gpus:
        if only is not None and g["index"] != only:
            continue
        bus = g["pci.bus_id"]
        if int(g["index"]) in st.lost():
            return lost_line(g), 15
        if g.get("mig.mode.current") == "Enabled" and m != "Default":
            # The three-line refusal of compute-mode-A100-80GB-MIG-1.txt.
            out.append("Setting compute mode to %s is not supported on a MIG-enabled device.\n" % m.upper())
            out.append("Unable to set the compute mode for GPU %s: Not Supported\n" % bus)
            out.append("Treating as warning and moving on.\n")
            continue
        st.data.setdefault("compute_mode", {})[g["index"]] = m
        out.append("Set compute mode to %s for GPU %s.\n" % (m.upper(), bus))
    out.append("All done.\n")
    return "".join(out), 0


def nvidia_smi(argv):
    log("nvidia-smi " + shlex.join(argv))
    sc = Scenario()
    st = State()
    if "error" in sc.s:
        return recording(sc.s["error"]["file"]).decode(), sc.s["error"]["exit"], st
    only = None
    args = list(argv)
    if len(args) >= 2 and args[0] in ("-i", "--id"):
        only = args[1]
        args = args[2:]
    elif args and args[0].startswith("--id="):
        only = args[0][5:]
        args = args[1:]
    if only is not None and all(g["index"] != only for g in sc.gpus):
        raise Fail("No devices were found\n", 6)

    if not args:
        return recording(sc.get("summary")).decode(), 0, st
    if args in (["-L"], ["--list-gpus"]):
        out, code = list_gpus(sc, st)
        return out, code, st
    if args == ["-q"]:
        return recording(sc.get("q")).decode(), 0, st
    if args == ["topo", "-m"]:
        return recording(sc.get("topo")).decode(), 0, st
    if args == ["mig", "-lgip"]:
        return recording(sc.get("mig_lgip")).decode(), 0, st
    if len(args) == 2 and args[0] == "mig" and args[1] in ("-lgi", "-lci"):
        key = "mig_lgi" if args[1] == "-lgi" else "mig_lci"
        if sc.get(key) is None:
            # The scenario says there are none: the answer of error-A30-MIG-1.txt.
            what = "GPU" if key == "mig_lgi" else "compute"
            return "No %s instances found: Not Found\n" % what, 6, st
        return recording(sc.s[key]).decode(), 0, st
    q = [a for a in args if a.startswith("--query-gpu=")]
    f = [a for a in args if a.startswith("--format=")]
    if len(args) == 2 and q and f:
        out, code = query_gpu(sc, st, q[0][12:], f[0][9:], only)
        return out, code, st
    if len(args) == 2 and args[0] in ("-c", "--compute-mode"):
        out, code = set_compute_mode(sc, st, args[1], only)
        return out, code, st
    if len(args) == 1 and args[0].startswith("--compute-mode="):
        out, code = set_compute_mode(sc, st, args[0][15:], only)
        return out, code, st
    raise Fail("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", 2)


# ---- nvidia-cuda-mps-control ----
#
# A real daemon, as the real tool has one (facts from an H100, driver 580.159.04, in
# tests/data/nvidia/mps-H100-*.txt): `-d` forks a daemon into its own session and returns
# once it listens on <pipe dir>/control; `-f` is that daemon in the foreground, logging
# on stdout instead of control.log. The daemon writes nvidia-cuda-mps-control.pid (its
# pid, no newline) and control_lock there; `quit` ends it (the pid file goes, the socket
# and control_lock stay); SIGTERM ends it without any of that. A client (no arguments)
# sends its stdin to the daemon and prints the answer; without a daemon listening it
# prints "Cannot find MPS control daemon process" on stderr and exits 1. Nothing here is
# kept in the client: a daemon killed behind the fake's back is gone, as a real one is.

NO_DAEMON = "Cannot find MPS control daemon process\n"   # mps-H100-no-daemon-1.txt (stderr)


def mps_pipe():
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")


def mps_connect(pipe):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(os.path.join(pipe, "control"))
    except OSError:
        s.close()
        return None
    return s


def mps_state_update(pipe, **fields):
    """Mirrors a daemon's state into the state file (for tests), under its lock."""
    st = State()
    if not st.f:
        return
    st.data.setdefault("mps", {}).setdefault(pipe, {"running": False}).update(fields)
    st.save()
    st.close()


def mem_limit_text(value):
    """A pinned memory limit as the daemon prints it back: 2048M -> 2G (mps-H100-get-limit-1.txt)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)", value)
    if not m:
        return value
    n, unit = int(m.group(1)), m.group(2)
    units = ["", "K", "M", "G", "T"]
    i = units.index(unit)
    while n and n % 1024 == 0 and i + 1 < len(units):
        n //= 1024
        i += 1
    return "%d%s" % (n, units[i])


class MpsDaemon:
    def __init__(self, pipe, foreground):
        self.pipe = pipe
        self.foreground = foreground
        self.pinned = {}
        self.pct = 100.0
        self.state_path = os.environ.get("KGPU_FAKE_NVIDIA_STATE")

    def log(self, msg):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ".%03d" % (int(time.time() * 1000) % 1000)
        line = "[%s Control %5d] %s\n" % (stamp, os.getpid(), msg)
        if self.foreground:
            sys.stdout.write(line)
            sys.stdout.flush()
            return
        logdir = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
        if os.path.isdir(logdir):
            with open(os.path.join(logdir, "control.log"), "a") as f:
                f.write(line)

    def listen(self):
        """Binds <pipe>/control (a stale one from an earlier daemon is replaced)."""
        path = os.path.join(self.pipe, "control")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        os.chmod(path, 0o666)
        self.sock.listen(16)
        open(os.path.join(self.pipe, "control_lock"), "a").close()
        with open(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid"), "w") as f:
            f.write(str(os.getpid()))
        for name in ("control_lock", "nvidia-cuda-mps-control.pid"):
            os.chmod(os.path.join(self.pipe, name), 0o666)
        mps_state_update(self.pipe, running=True, pid=os.getpid(),
                         visible=os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                         pinned_mem_limit={}, active_thread_percentage="%.1f" % self.pct)
        self.log("Starting control daemon using socket %s/control" % self.pipe)
        self.log("To connect CUDA applications to this daemon, set env CUDA_MPS_PIPE_DIRECTORY=%s" % self.pipe)
        self.log("CUDA MPS Control binary version: 13000")

    def command(self, line):
        """One command line: (answer, quit?)."""
        words = line.split()
        cmd = words[0]
        if cmd == "quit" and len(words) == 1:
            return "", True
        if cmd == "set_default_device_pinned_mem_limit" and len(words) == 3:
            self.pinned[words[1]] = words[2]
            mps_state_update(self.pipe, pinned_mem_limit=dict(self.pinned))
            return "", False
        if cmd == "get_default_device_pinned_mem_limit" and len(words) == 2:
            return mem_limit_text(self.pinned.get(words[1], "0")) + "\n", False
        if cmd == "set_default_active_thread_percentage" and len(words) == 2:
            # mps-H100-set-percentage-*.txt: the value in force is printed back; 0 is
            # refused silently (the old value is printed).
            try:
                v = float(words[1])
            except ValueError:
                v = 0
            if 0 < v <= 100:
                self.pct = v
                mps_state_update(self.pipe, active_thread_percentage="%.1f" % v)
            return "%.1f\n" % self.pct, False
        if cmd == "get_default_active_thread_percentage" and len(words) == 1:
            return "%.1f\n" % self.pct, False
        if cmd == "get_server_list" and len(words) == 1:
            return "", False    # no clients, no servers
        if cmd == "start_server" and len(words) == 3 and words[1] == "-uid":
            return "", False
        return 'Unknown command "%s"\n' % line, False    # mps-H100-unknown-command-1.txt

    def serve(self):
        """Answers clients until quit; returns the exit status."""
        self.sock.settimeout(0.5)
        while True:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                # Not the real tool's: the test that made this daemon is gone (its
                # state file with it), so no test leaves a daemon behind.
                if self.state_path and not os.path.exists(self.state_path):
                    return 0
                continue
            with conn:
                conn.settimeout(10)
                data = b""
                with contextlib.suppress(OSError):
                    while True:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                out, quit = [], False
                for line in data.decode(errors="replace").splitlines():
                    if not line.strip():
                        continue
                    self.log("Cmd:%s" % line.strip())
                    answer, quit = self.command(line.strip())
                    out.append(answer)
                    if quit:
                        break
                if quit:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.pipe, "nvidia-cuda-mps-control.pid"))
                    mps_state_update(self.pipe, running=False, pid=0)
                    self.log("Exit with status 0")
                with contextlib.suppress(OSError):
                    conn.sendall("".join(out).encode())
                if quit:
                    return 0


def mps_start(pipe, foreground):
    """-d / -f: (stdout, stderr, exit status) of the command that started it."""
    s = mps_connect(pipe)
    if s:
        s.close()
        return "An instance of this daemon is already running\n", "", 1    # mps-H100-already-running-1.txt
    if not os.path.isdir(pipe):
        os.makedirs(pipe)
        os.chmod(pipe, 0o777)   # as the real -d leaves a directory it made
    d = MpsDaemon(pipe, foreground)
    if foreground:
        d.listen()
        return "", "", d.serve()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        try:
            d.listen()
        except OSError:
            os._exit(1)
        os.write(w, b"ready")
        os.close(w)
        os._exit(d.serve())
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as f:
        ready = f.read() == b"ready"
    if not ready:
        return "", "fake nvidia-cuda-mps-control: the daemon could not listen in %s\n" % pipe, 1
    return "", "", 0


def mps_control(argv, stdin):
    """(stdout, stderr, exit status) of one nvidia-cuda-mps-control run."""
    pipe = mps_pipe()
    extra = " CUDA_MPS_PIPE_DIRECTORY=%s" % pipe
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        extra += " CUDA_VISIBLE_DEVICES=%s" % os.environ["CUDA_VISIBLE_DEVICES"]
    log(" ".join(["nvidia-cuda-mps-control"] + ([shlex.join(argv)] if argv else []) + ["[" + extra.strip() + "]"]))
    if argv in (["-d"], ["--daemon"]):
        return mps_start(pipe, False)
    if argv in (["-f"], ["--forground"]):
        return mps_start(pipe, True)
    if argv:
        return "Invalid combination of input arguments.\n", "", 1

    lines = [line for line in stdin.splitlines() if line.strip()]
    s = mps_connect(pipe)
    if not s:
        if lines:
            log("nvidia-cuda-mps-control < " + lines[0])
        return "", NO_DAEMON, 1
    for line in lines:
        log("nvidia-cuda-mps-control < " + line)
    with s:
        s.settimeout(30)
        s.sendall("".join(line + "\n" for line in lines).encode())
        s.shutdown(socket.SHUT_WR)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    return out.decode(errors="replace"), "", 0


# ---- helpers for tests that drive the fake tools (python integration tests) ----

def test_env(scenario, workdir, lost=None):
    """Environment variables that point the fake tools at a scenario and at a log and
    state file in workdir."""
    env = {"KGPU_FAKE_NVIDIA_SCENARIO": scenario,
           "KGPU_FAKE_NVIDIA_LOG": os.path.join(workdir, "fake-nvidia.log"),
           "KGPU_FAKE_NVIDIA_STATE": os.path.join(workdir, "fake-nvidia-state.json")}
    if lost is not None:
        env["KGPU_FAKE_NVIDIA_LOST"] = ",".join(str(i) for i in lost)
    return env


def read_commands(workdir):
    """The logged commands, one string per line (see the module docstring)."""
    try:
        with open(os.path.join(workdir, "fake-nvidia.log")) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def read_state(workdir):
    try:
        with open(os.path.join(workdir, "fake-nvidia-state.json")) as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    return json.loads(text) if text.strip() else {}


def _update_state(workdir, change):
    """Changes the state file under the lock the fake tools hold while they rewrite it."""
    path = os.path.join(workdir, "fake-nvidia-state.json")
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        data = json.loads(text) if text.strip() else {}
        change(data)
        f.seek(0)
        f.truncate()
        json.dump(data, f, indent=1, sort_keys=True)


def set_lost(workdir, indices):
    """Marks GPUs lost (or none, with []) for every later command, as a health test needs."""
    _update_state(workdir, lambda data: data.__setitem__("lost", sorted(indices)))


def put_compute_mode(workdir, index, mode):
    """Puts GPU `index` in compute mode `mode` ("Prohibited", ...) behind the probe's back,
    as an operator's nvidia-smi -c would."""
    m = COMPUTE_MODES[mode.upper()]
    _update_state(workdir, lambda data: data.setdefault("compute_mode", {}).__setitem__(str(index), m))


def stop_daemons(workdir):
    """Ends the fake MPS daemons the state file in workdir knows (a test's teardown:
    `-d` daemons outlive the process that started them, as real ones do)."""
    for inst in read_state(workdir).get("mps", {}).values():
        pid = inst.get("pid")
        if not inst.get("running") or not pid:
            continue
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if b"nvidia-cuda-mps-control" not in f.read():
                    continue
            os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


def main(tool):
    delay = os.environ.get("KGPU_FAKE_NVIDIA_DELAY")
    st = None
    err = ""
    try:
        if tool == "nvidia-smi":
            out, code, st = nvidia_smi(sys.argv[1:])
        else:
            stdin = "" if sys.argv[1:] else sys.stdin.read()
            out, err, code = mps_control(sys.argv[1:], stdin)
    except Fail as e:
        out, code = e.text, e.code
        if out.startswith("fake "):
            # The fake's own complaint, not nvidia-smi output.
            sys.stderr.write(out)
            out = ""
    if delay:
        time.sleep(float(delay))
    if st:
        st.save()
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return code
