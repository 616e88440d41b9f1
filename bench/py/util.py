"""Shared helpers of the benchmark harness: progress lines, running commands
under a timeout in their own process group (so an interrupted run can end
exactly the processes it started), device and process counters, and a
description of the machine.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

T0 = time.monotonic()
_LIVE = {}  # pid -> Popen of commands running now (each leads its own group)
LOG = None  # open file receiving every command's output, set by bench/run


def elapsed():
    return time.monotonic() - T0


def say(msg):
    """One progress line, prefixed with the run's elapsed time."""
    line = "[%7.1fs] %s" % (elapsed(), msg)
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


class CmdError(Exception):
    pass


class Timeout(CmdError):
    pass


def run(cmd, timeout=60, check=True, env=None, cwd=None, quiet=False):
    """Run `cmd` (a list) in a new session under `timeout` seconds.
    Returns (rc, stdout, stderr). Output goes through temporary files, so a
    daemon the command leaves behind cannot hold the call open. On timeout
    the whole group is killed and Timeout raised; with check, a non-zero
    exit raises CmdError."""
    if LOG and not quiet:
        LOG.write("$ %s\n" % " ".join(map(str, cmd)))
        LOG.flush()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen([str(c) for c in cmd], stdout=fo, stderr=fe,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             env=env, cwd=cwd, text=True)
        _LIVE[p.pid] = p
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            p.wait()
            raise Timeout("timed out after %ss: %s" % (timeout, " ".join(map(str, cmd))))
        finally:
            _LIVE.pop(p.pid, None)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if LOG and not quiet:
        if out.strip():
            LOG.write(out[-4000:] + "\n")
        if err.strip():
            LOG.write("stderr: " + err[-4000:] + "\n")
        LOG.flush()
    if check and p.returncode != 0:
        raise CmdError("%s: exit %d: %s" % (" ".join(map(str, cmd)), p.returncode,
                                            (err.strip() or out.strip())[-500:]))
    return p.returncode, out, err


def start(cmd, env=None):
    """Start a background command in its own group (ended by kill_group)."""
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         start_new_session=True, env=env, text=True)
    _LIVE[p.pid] = p
    return p


def finish(p, timeout):
    """Wait for a command from start(); returns (rc, out, err)."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(p)
        out, err = p.communicate()
        _LIVE.pop(p.pid, None)
        raise Timeout("timed out after %ss" % timeout)
    _LIVE.pop(p.pid, None)
    return p.returncode, out, err


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_live():
    """End every command this harness started that is still running."""
    for p in list(_LIVE.values()):
        kill_group(p)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    _LIVE.clear()


def last_json(text):
    """The last line of `text` that parses as a JSON object."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise CmdError("no JSON result in output: %r" % text[-300:])


# ---- counters -------------------------------------------------------------

def disk_stat(dev):
    """Counters of block device `dev` (/dev/loopN) from /sys/block/*/stat
    (Documentation/block/stat.rst): write I/Os (field 5), sectors written
    (field 7), flush I/Os (field 16, present on kernels since 5.5)."""
    if not dev:
        return None
    with open("/sys/block/%s/stat" % os.path.basename(dev)) as f:
        v = [int(x) for x in f.read().split()]
    return {"writes": v[4], "sectors": v[6], "flushes": v[15] if len(v) >= 17 else None,
            "reads": v[0], "sectors_read": v[2]}


def stat_delta(a, b):
    if a is None or b is None:
        return None
    return {k: (None if a[k] is None or b[k] is None else b[k] - a[k]) for k in a}


# A step during which the hypervisor stole at least this percent of the
# CPU is marked in the report (†): its figure may be low for that reason.
STEAL_MARK = 5.0


def cpu_ticks():
    """The machine's CPU time so far from /proc/stat's `cpu` line, in
    ticks: (all, steal). Steal is time the hypervisor ran something else
    while this machine's vCPUs wanted to run (proc(5))."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        return sum(v), v[7]
    except (OSError, ValueError, IndexError):
        return None


def steal_pct(a, b):
    """Percent of the CPU time between two `cpu_ticks()` the hypervisor
    stole, or None."""
    if a is None or b is None or b[0] <= a[0]:
        return None
    return 100.0 * (b[1] - a[1]) / (b[0] - a[0])


# Before each filesystem is set up the run waits, for at most CALM_TIMEOUT
# seconds, for a second with at most CALM_PCT percent of the CPU stolen.
CALM_PCT = 2.0
CALM_TIMEOUT = 120.0


def wait_calm():
    """Wait until one second passes with at most CALM_PCT percent of the
    CPU stolen by the hypervisor (another guest, or the host writing back
    what this machine wrote), for at most CALM_TIMEOUT seconds. Returns
    (seconds waited, the last second's steal percent, None if unknown)."""
    t0 = time.monotonic()
    while True:
        a = cpu_ticks()
        time.sleep(1.0)
        pct = steal_pct(a, cpu_ticks())
        waited = time.monotonic() - t0
        if pct is None or pct <= CALM_PCT or waited >= CALM_TIMEOUT:
            return waited, pct


def proc_cpu(pid):
    """utime+stime of process `pid` in seconds, or None."""
    if not pid:
        return None
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def find_pids(words, exact=()):
    """Pids whose command line contains every string in `words` (within an
    argument) and every string in `exact` (as a whole argument)."""
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv and all(any(w in a for a in argv) for w in words) \
                and all(w in argv for w in exact) \
                and os.path.basename(argv[0]) not in ("timeout", "sudo", "bash", "sh"):
            found.append(int(d))
    return found


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# ---- machine --------------------------------------------------------------

def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _first_line(cmd):
    """The version line of a tool: the first output line naming it."""
    if not shutil.which(cmd[0]) and not os.path.exists(cmd[0]):
        return "not installed"
    try:
        rc, out, err = run(cmd, timeout=20, check=False, quiet=True)
    except CmdError:
        return "?"
    lines = [l.strip() for l in (out + "\n" + err).splitlines() if l.strip()]
    name = os.path.basename(cmd[0]).split(".")[0]
    named = [l for l in lines if name in l]
    return (named or lines or ["?"])[0]


def cpu_idle():
    """How an idle CPU waits: the cpuidle driver, and for the guest
    haltpoll driver how long it polls before halting. A FUSE request is a
    wake-up of another task, often on the other (idle) CPU, so this is a
    large part of its cost in a virtual machine (docs/BENCHMARKS.md)."""
    driver = _read("/sys/devices/system/cpu/cpuidle/current_driver").strip() or "?"
    poll = _read("/sys/module/haltpoll/parameters/guest_halt_poll_ns").strip()
    return driver + (", guest_halt_poll_ns %s" % poll if poll else "")


def machine(scratch, root):
    cpu = re.search(r"model name\s*:\s*(.*)", _read("/proc/cpuinfo"))
    mem = re.search(r"MemTotal:\s*(\d+)", _read("/proc/meminfo"))
    info = {
        "cpu": cpu.group(1).strip() if cpu else "?",
        "cores": os.cpu_count(),
        "ram_gib": round(int(mem.group(1)) / 2**20, 1) if mem else None,
        "kernel": os.uname().release,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu_idle": cpu_idle(),
    }
    try:
        _, out, _ = run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", scratch],
                        timeout=10, check=False, quiet=True)
        src = out.split()[0] if out.split() else "?"
        info["storage"] = out.strip()
        base = os.path.basename(os.path.realpath(src))
        rot = _read("/sys/class/block/%s/queue/rotational" % base).strip()
        if not rot:  # a partition: look at its parent disk
            parent = os.path.basename(os.path.dirname(os.path.realpath("/sys/class/block/" + base)))
            rot = _read("/sys/class/block/%s/queue/rotational" % parent).strip()
        info["storage"] += {"1": " (rotational)", "0": " (non-rotational)"}.get(rot, "")
    except (CmdError, IndexError):
        info["storage"] = "?"
    tux3 = os.path.join(root, "target/release/tux3")
    try:
        _, desc, _ = run(["git", "-C", root, "describe", "--always", "--dirty", "--tags"],
                         timeout=10, check=False, quiet=True)
    except CmdError:
        desc = ""
    info["versions"] = {
        "tux3": (desc.strip() or "?") + " (" + _first_line([tux3, "--version"]) + ")",
        "mkfs.ext4": _first_line(["mkfs.ext4", "-V"]),
        "mkfs.xfs": _first_line(["mkfs.xfs", "-V"]),
        "mkfs.btrfs": _first_line(["mkfs.btrfs", "--version"]),
        "fuse2fs": _first_line(["fuse2fs", "-V"]),
        "dbench": _first_line(["dbench", "--help"]),
        "fio": _first_line(["fio", "--version"]),
        "gcc": _first_line(["gcc", "--version"]),
    }
    return info


def say_err(msg):
    print(msg, file=sys.stderr, flush=True)
