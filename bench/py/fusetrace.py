"""FUSE requests by opcode, counted with the kernel tracepoint
fuse:fuse_request_send (one event per request the kernel sends to a FUSE
server, through /dev/fuse or io_uring alike).

The events go to a tracing instance of the run's own
(/sys/kernel/tracing/instances/tux3-bench-PID): a private ring buffer with
its own event switch and tracing_on, so the global tracing state and any
other user of tracefs are never touched. For each timed step the buffer is
cleared, the event filtered in the kernel to the connection of the mount
under test (its device number, which the tracepoint prints as
`connection`), and recording switched on around the step's body only, the
same window as the daemon's CPU time. This kernel has no hist triggers, so
the counts come from the instance's `trace` text afterwards, read as a
stream. Events the buffer had no room for show in per_cpu/cpuN/stats
(overrun, dropped events) and are reported with the counts.

The instance is removed on every exit path (close(), called from bench/run's
clean-up); one left by a run killed outright is removed by the next run
(clean_stale). Tracefs is mounted only if it is not mounted yet, through the
harness's Env so that its clean-up unmounts it.
"""

import collections
import os
import re

from util import CmdError, pid_alive, run, say

TRACEFS = "/sys/kernel/tracing"
EVENT = "events/fuse/fuse_request_send"
PREFIX = "tux3-bench-"
BUFFER_KB = 131072  # per CPU
CHUNK = 1 << 20
# "connection 40 req 6 opcode 1 (FUSE_LOOKUP) len 43"
LINE = re.compile(rb"connection (\d+) .*?opcode (\d+) \(([^)]*)\)")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _read(path):
    with open(path) as f:
        return f.read()


def tracefs_mounted():
    return os.path.isfile(os.path.join(TRACEFS, "trace"))


def _unescape(field):
    """A path from /proc/self/mountinfo (octal escapes for space, tab, etc.)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def connection(mnt):
    """The FUSE connection of the filesystem mounted at `mnt`: its device
    number in the kernel's encoding ((major << 20) | minor, as the
    tracepoint prints it; for FUSE the major is 0, so the number is the one in
    /sys/fs/fuse/connections/). None when `mnt` is not a FUSE mount."""
    real = os.path.realpath(mnt)
    found = None
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                a, b = left.split(), right.split()
                if len(a) >= 5 and b and _unescape(a[4]) == real:
                    found = (a[2], b[0])  # the last one is the mount on top
    except OSError:
        return None
    if not found or not (found[1] == "fuse" or found[1].startswith("fuse.")
                         or found[1] == "fuseblk"):
        return None
    major, minor = (int(x) for x in found[0].split(":"))
    return (major << 20) | minor


def parse(path, chunk=CHUNK):
    """Counts of the `trace` text at `path`: {(connection, opcode name): n},
    read in chunks (a full buffer is millions of lines)."""
    counts = collections.Counter()
    rest = b""
    with open(path, "rb") as f:
        while True:
            buf = f.read(chunk)
            if not buf:
                break
            buf = rest + buf
            cut = buf.rfind(b"\n") + 1
            rest = buf[cut:]
            counts.update(LINE.findall(buf, 0, cut))
    if rest:
        counts.update(LINE.findall(rest))
    out = collections.Counter()
    for (conn, num, name), n in counts.items():
        name = name.decode(errors="replace")
        if name.startswith("FUSE_"):
            name = name[5:]
        elif not name or name.startswith("0x"):
            name = "opcode %d" % int(num)
        out[(int(conn), name)] += n
    return out


def _is_harness(pid):
    """Whether process `pid` runs bench/run (and is not another process that
    got the pid of a dead run)."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        cwd = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        return False
    for a in argv:
        path = os.path.normpath(os.path.join(cwd, a))
        if os.path.basename(path) == "run" and os.path.basename(os.path.dirname(path)) == "bench":
            return True
    return False


def clean_stale():
    """Remove the instances of earlier runs that are no longer running (one
    named with this process's pid is an earlier run's too: called before this
    run makes its own)."""
    d = os.path.join(TRACEFS, "instances")
    if not os.path.isdir(d):
        return
    for name in os.listdir(d):
        if not name.startswith(PREFIX) or not name[len(PREFIX):].isdigit():
            continue
        pid = int(name[len(PREFIX):])
        if pid != os.getpid() and pid_alive(pid) and _is_harness(pid):
            continue
        say("removing the tracing instance %s of an interrupted run" % name)
        inst = os.path.join(d, name)
        for f, v in (("tracing_on", "0"), (EVENT + "/enable", "0")):
            try:
                _write(os.path.join(inst, f), v)
            except OSError:
                pass
        try:
            os.rmdir(inst)
        except OSError as e:
            say("warning: cannot remove %s: %s" % (inst, e))


class FuseTrace:
    """One tracing instance for the run: open() once, then per step
    start(conn) / stop() around the timed body and collect(conn) after it;
    close() on every exit path."""

    def __init__(self, env, buffer_kb=BUFFER_KB):
        self.env = env
        self.buffer_kb = buffer_kb
        self.dir = None
        self.used = False  # the instance was set up
        self.mounted = False
        self.why = "not started"
        self.lost_at_start = 0
        self.lost_total = 0
        self.step_error = None

    def info(self):
        """For results.json: whether requests were counted, else why not."""
        if not self.used:
            return {"counted": False, "why": self.why}
        return {"counted": True, "buffer_kb": self.buffer_kb, "lost": self.lost_total}

    def open(self):
        """Set up the instance; False (with self.why) if it cannot be."""
        try:
            if not tracefs_mounted():
                if not os.path.isdir(TRACEFS):
                    raise OSError("%s does not exist" % TRACEFS)
                run(["mount", "-t", "tracefs", "nodev", TRACEFS], timeout=30)
                self.mounted = True
                self.env._mounted(TRACEFS)
            if not os.path.isdir(os.path.join(TRACEFS, EVENT)):
                run(["modprobe", "fuse"], timeout=30, check=False, quiet=True)
            if not os.path.isdir(os.path.join(TRACEFS, EVENT)):
                raise OSError("the kernel has no tracepoint fuse:fuse_request_send")
            clean_stale()
            d = os.path.join(TRACEFS, "instances", PREFIX + str(os.getpid()))
            os.mkdir(d)
            self.dir = d
            _write(self.path("tracing_on"), "0")
            # No more than an eighth of the memory available for all CPUs.
            avail = re.search(r"MemAvailable:\s*(\d+)", _read("/proc/meminfo"))
            if avail:
                self.buffer_kb = min(self.buffer_kb,
                                     int(avail.group(1)) // (8 * (os.cpu_count() or 1)))
            _write(self.path("buffer_size_kb"), str(self.buffer_kb))
            self.buffer_kb = int(_read(self.path("buffer_size_kb")).split()[0])
            _write(self.path(EVENT, "enable"), "1")
            self.why = ""
            self.used = True
            say("FUSE requests counted with fuse:fuse_request_send in %s (%d KiB per CPU)" % (
                d, self.buffer_kb))
            return True
        except (OSError, CmdError, ValueError) as e:
            why = "tracing unavailable: %s" % e
            say("FUSE requests not counted: %s" % why)
            self.close()
            self.why = why
            return False

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def lost(self):
        """Events lost so far in the instance, over all CPUs."""
        n = 0
        base = self.path("per_cpu")
        for cpu in os.listdir(base):
            try:
                text = _read(os.path.join(base, cpu, "stats"))
            except OSError:
                continue
            for key in ("overrun", "dropped events"):
                m = re.search(r"^%s:\s*(\d+)" % key, text, re.M)
                if m:
                    n += int(m.group(1))
        return n

    def start(self, conn):
        """Clear the buffer, filter to `conn`, start recording. A failure
        here (or in stop or collect) costs the step its counts, never the
        step itself: it is noted in the row by collect."""
        self.step_error = None
        try:
            _write(self.path(EVENT, "filter"), "connection == %d" % conn)
            _write(self.path("trace"), "")  # opening with O_TRUNC clears the buffer
            self.lost_at_start = self.lost()
            _write(self.path("tracing_on"), "1")
        except OSError as e:
            self.step_error = "starting the trace: %s" % e

    def stop(self):
        try:
            _write(self.path("tracing_on"), "0")
        except OSError as e:
            self.step_error = self.step_error or "stopping the trace: %s" % e

    def collect(self, conn):
        """The step's counts: fields for its row."""
        try:
            if self.step_error:
                raise OSError(self.step_error)
            counts = parse(self.path("trace"))
            lost = max(0, self.lost() - self.lost_at_start)
            _write(self.path("trace"), "")
        except OSError as e:
            say("warning: FUSE requests of this step not counted: %s" % e)
            return {"fuse_requests_error": str(e)[:200]}
        self.lost_total += lost
        ops = {name: n for (c, name), n in counts.most_common() if c == conn}
        other = sum(n for (c, _), n in counts.items() if c != conn)
        row = {"fuse_requests": sum(ops.values()), "fuse_requests_by_op": ops,
               "fuse_connection": conn}
        if lost:
            row["fuse_requests_lost"] = lost
        if other:  # none expected: the kernel filter keeps only `conn`
            row["fuse_requests_other"] = other
        return row

    def close(self):
        """Stop, disable the event and remove the instance; unmount tracefs
        if this run mounted it. Safe to call more than once."""
        if self.dir:
            for f, v in (("tracing_on", "0"), (EVENT + "/enable", "0")):
                try:
                    _write(self.path(f), v)
                except OSError as e:
                    say("warning: %s: %s" % (self.path(f), e))
            try:
                os.rmdir(self.dir)
            except OSError as e:
                say("warning: cannot remove the tracing instance %s: %s" % (self.dir, e))
            self.dir = None
            self.why = "closed"
        if self.mounted:
            self.env.unmount(TRACEFS)
            self.mounted = False
