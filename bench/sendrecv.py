#!/usr/bin/env python3
"""bench/sendrecv.py - tux3 send | tux3 receive against Btrfs send | receive.

Each filesystem runs on loop devices with direct I/O over sparse images in a
scratch directory: a source volume and a target volume, formatted fresh for
each case. tux3 sends from its mount (the snapshot is read from the image
underneath) and receives into an unmounted image; Btrfs sends a read-only
snapshot of a subvolume and receives into a second mounted Btrfs. Caches are
dropped before every timed step. The cases:

  full-tree     a full send piped into receive of /usr/include (many small
                files), beside the volume's cold sequential read speed (every
                file read through the source's mount after dropping caches)
  full-big      the same for one file of BIG MiB (4 GiB by default)
  incr-1000     1,000 changed files (one block appended) in a volume of
                FILES files: the send alone (to a file), with the blocks it
                read from the device; then the receive of that file
  incr-empty    an incremental send with no change, piped into receive
  resume        (tux3 only) a full receive of a KILL_MIB MiB file killed
                with SIGKILL KILLS times, each once a random share of the
                stream went to it; after each, `tux3 receive
                --resume-token` and `tux3 send --resume`; counts resumes
                that went backwards or restarted from zero, and checks the
                result byte for byte
  many-snaps    (tux3 only) SNAPS snapshots created and deleted with a write
                between them through the mount, then fsck: clean, and the
                blocks in use those of a fresh volume given the same writes
                and no snapshot

Usage: bench/sendrecv.py [--quick] [--fs tux3,btrfs] [--scratch DIR]
                         [--out bench/sendrecv.md] [--cases LIST]
                         [--runs N] [--snaps N]

The timed cases run N times (3; --quick 1) on fresh volumes, and the
report gives the median and every time measured.

Writes the table to --out (bench/py/report.py copies bench/sendrecv.md into
docs/BENCHMARKS.md) and prints it. Root only. Every mount and loop device it
makes is undone on every exit path.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "py"))

import util  # noqa: E402
from util import CmdError, run, say  # noqa: E402

MIB = 1 << 20
LOOPS = []   # loop devices made here
MOUNTS = []  # mount points mounted here


# ---- setup and teardown ----------------------------------------------------

def loop(path, size):
    with open(path, "wb") as f:
        f.truncate(size)
    _, out, _ = run(["losetup", "--direct-io=on", "-f", "--show", path], timeout=30)
    dev = out.strip()
    LOOPS.append(dev)
    return dev


def unloop(dev):
    """Detach `dev` if this run attached it and has not detached it yet."""
    if dev not in LOOPS:
        return
    LOOPS.remove(dev)
    run(["losetup", "-d", dev], timeout=30, check=False)


def umount(mnt, tux3=None):
    if tux3:
        run([tux3, "umount", mnt], timeout=120, check=False)
    if os.path.ismount(mnt):
        run(["umount", mnt], timeout=120, check=False)
    if mnt in MOUNTS:
        MOUNTS.remove(mnt)


def cleanup():
    util.kill_live()
    for m in list(MOUNTS):
        run(["umount", "-l", m], timeout=60, check=False)
    MOUNTS.clear()
    for d in list(LOOPS):
        run(["losetup", "-d", d], timeout=30, check=False)
    LOOPS.clear()


def drop_caches():
    run(["sync"], timeout=300)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def sectors_read(dev):
    with open("/sys/block/%s/stat" % os.path.basename(dev)) as f:
        return int(f.read().split()[2])


def pipe(a, b, timeout, stdin=None, stdout=None):
    """Run `a | b` (lists); returns seconds. Raises CmdError naming the
    side that failed."""
    t0 = time.monotonic()
    pa = subprocess.Popen(a, stdout=subprocess.PIPE, stdin=stdin or subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True)
    pb = subprocess.Popen(b, stdin=pa.stdout, stdout=stdout or subprocess.DEVNULL,
                          stderr=subprocess.PIPE, start_new_session=True)
    pa.stdout.close()
    try:
        _, eb = pb.communicate(timeout=timeout)
        _, ea = pa.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for p in (pa, pb):
            util.kill_group(p)
        raise util.Timeout("timed out: %s | %s" % (" ".join(a), " ".join(b)))
    secs = time.monotonic() - t0
    if pa.returncode != 0:
        raise CmdError("%s: exit %d: %s" % (" ".join(a), pa.returncode, ea.decode()[-400:]))
    if pb.returncode != 0:
        raise CmdError("%s: exit %d: %s" % (" ".join(b), pb.returncode, eb.decode()[-400:]))
    return secs


def timed(cmd, timeout, **kw):
    t0 = time.monotonic()
    run(cmd, timeout=timeout, **kw)
    return time.monotonic() - t0


def cold_read_speed(root, nbytes):
    """Bytes per second of a cold read of every file under `root` through
    its filesystem, in directory order, 4 MiB at a time (the volume's cold
    sequential read speed for that content)."""
    drop_caches()
    t0 = time.monotonic()
    for dp, ds, fs in os.walk(root):
        ds.sort()
        for f in sorted(fs):
            p = os.path.join(dp, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb", buffering=0) as fh:
                while fh.read(4 * MIB):
                    pass
    return nbytes / (time.monotonic() - t0)


def fill_random(path, nbytes):
    """A file of `nbytes` that does not compress or dedup."""
    chunk = os.urandom(4 * MIB)
    with open(path, "wb") as f:
        left = nbytes
        i = 0
        while left > 0:
            n = min(left, len(chunk))
            # Each chunk differs: its first 8 bytes are its number.
            f.write(i.to_bytes(8, "little") + chunk[8:n])
            left -= n
            i += 1


def small_tree(root, files):
    """`files` small files (1-3 blocks) in directories of 1,000."""
    for i in range(files):
        d = os.path.join(root, "d%03d" % (i // 1000))
        if i % 1000 == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%05d" % i), "wb") as f:
            f.write(b"%d\n" % i * (1 + i % 3) * 700)


def tree_bytes(root):
    total = 0
    for dp, _, fs in os.walk(root):
        for f in fs:
            try:
                total += os.lstat(os.path.join(dp, f)).st_size
            except OSError:
                pass
    return total


# ---- the two filesystems ---------------------------------------------------

class Tux3:
    name = "tux3"

    def __init__(self, a, scratch):
        self.tux3, self.scratch, self.a = a.tux3, scratch, a

    def fresh(self, size):
        """(source device, its mount point, target device), formatted."""
        self.src = loop(os.path.join(self.scratch, "t-src.img"), size)
        self.dst = loop(os.path.join(self.scratch, "t-dst.img"), size)
        for d in (self.src, self.dst):
            run([self.tux3, "mkfs", d], timeout=120)
        self.mnt = os.path.join(self.scratch, "t-mnt")
        os.makedirs(self.mnt, exist_ok=True)
        return self.src, self.mnt, self.dst

    def mkfs_from(self, tree, size):
        """As fresh(), with the source made from `tree` (mkfs --from)."""
        self.fresh(size)
        run([self.tux3, "mkfs", "--from", tree, self.src], timeout=1800)

    def mount(self):
        run([self.tux3, "mount", self.src, self.mnt], timeout=120)
        MOUNTS.append(self.mnt)
        return self.mnt

    def data(self):
        return self.mnt

    def snap(self, name):
        run([self.tux3, "snapshot", "create", self.mnt, name], timeout=120)

    def send(self, snap, base=None):
        return [self.tux3, "send"] + (["-i", base] if base else []) + [self.mnt, snap]

    def receive(self):
        return [self.tux3, "receive", self.dst]

    def done(self):
        umount(self.mnt, self.tux3)
        for d in (self.src, self.dst):
            unloop(d)


class Btrfs:
    name = "btrfs"

    def __init__(self, a, scratch):
        self.scratch, self.a = scratch, a

    def fresh(self, size):
        self.src = loop(os.path.join(self.scratch, "b-src.img"), size)
        self.dst = loop(os.path.join(self.scratch, "b-dst.img"), size)
        for d in (self.src, self.dst):
            run(["mkfs.btrfs", "-q", "-f", d], timeout=120)
        self.mnt = os.path.join(self.scratch, "b-mnt")
        self.dmnt = os.path.join(self.scratch, "b-dmnt")
        for m in (self.mnt, self.dmnt):
            os.makedirs(m, exist_ok=True)
        run(["mount", self.dst, self.dmnt], timeout=60)
        MOUNTS.append(self.dmnt)
        return self.src, self.mnt, self.dst

    def mkfs_from(self, tree, size):
        self.fresh(size)
        self.mount()
        run(["cp", "-a", tree + "/.", self.data()], timeout=1800)

    def mount(self):
        if not os.path.ismount(self.mnt):
            run(["mount", self.src, self.mnt], timeout=60)
            MOUNTS.append(self.mnt)
            vol = os.path.join(self.mnt, "vol")
            if not os.path.exists(vol):
                run(["btrfs", "-q", "subvolume", "create", vol], timeout=60)
        return self.mnt

    def data(self):
        return os.path.join(self.mnt, "vol")

    def snap(self, name):
        run(["btrfs", "-q", "subvolume", "snapshot", "-r", self.data(),
             os.path.join(self.mnt, name)], timeout=120)

    def send(self, snap, base=None):
        return ["btrfs", "-q", "send"] + (["-p", os.path.join(self.mnt, base)] if base else []) + [
            os.path.join(self.mnt, snap)]

    def receive(self):
        return ["btrfs", "-q", "receive", self.dmnt]

    def done(self):
        umount(self.mnt)
        umount(self.dmnt)
        for d in (self.src, self.dst):
            unloop(d)


# ---- the cases -------------------------------------------------------------

def case_full(fs, a, tree, label, nbytes):
    """A full send | receive of `tree` (copied in), beside a cold read of
    as many bytes of the source device."""
    fs.mkfs_from(tree, a.size)
    fs.mount()
    fs.snap("s1")
    speed = cold_read_speed(fs.data(), nbytes)
    drop_caches()
    secs = pipe(fs.send("s1"), fs.receive(), a.timeout)
    rate = nbytes / secs
    return dict(case=label, seconds=secs, mb_s=rate / 1e6, read_mb_s=speed / 1e6,
                vs_read=rate / speed)


def case_incr(fs, a, scratch):
    tree = os.path.join(scratch, "tree")
    if not os.path.isdir(tree):
        small_tree(tree, a.files)
    fs.mkfs_from(tree, a.size)
    fs.mount()
    fs.snap("base")
    pipe(fs.send("base"), fs.receive(), a.timeout)
    data = fs.data()
    step = max(1, a.files // 1000)
    for i in range(0, a.files, step)[:1000]:
        p = os.path.join(data, "d%03d" % (i // 1000), "f%05d" % i)
        with open(p, "ab") as f:
            f.write(b"x" * 4096)
    fs.snap("s2")
    drop_caches()
    stream = os.path.join(scratch, "incr.stream")
    before = sectors_read(fs.src)
    with open(stream, "wb") as out:
        t0 = time.monotonic()
        p = subprocess.run(fs.send("s2", "base"), stdout=out, stderr=subprocess.PIPE,
                           timeout=a.timeout)
        gen = time.monotonic() - t0
    if p.returncode != 0:
        raise CmdError("send: %s" % p.stderr.decode()[-400:])
    blocks = (sectors_read(fs.src) - before) * 512 // 4096
    size = os.path.getsize(stream)
    drop_caches()
    with open(stream, "rb") as inp:
        t0 = time.monotonic()
        p = subprocess.run(fs.receive(), stdin=inp, stderr=subprocess.PIPE, timeout=a.timeout)
        rec = time.monotonic() - t0
    if p.returncode != 0:
        raise CmdError("receive: %s" % p.stderr.decode()[-400:])
    os.unlink(stream)
    fs.snap("s3")
    drop_caches()
    empty = pipe(fs.send("s3", "s2"), fs.receive(), a.timeout)
    return [dict(case="incr-1000 send", seconds=gen, blocks_read=blocks, stream_bytes=size,
                 files=a.files),
            dict(case="incr-1000 receive", seconds=rec),
            dict(case="incr-empty send|receive", seconds=empty)]


def token_next(tok):
    """The record number a resume token names (its sixth field)."""
    return int(tok.strip().split("-")[5], 16)


def cut_receive(send_cmd, recv_cmd, nbytes, timeout):
    """Run `send_cmd | recv_cmd` with this process in the middle, and kill
    the receive with SIGKILL once `nbytes` of the stream went to it (None:
    let it finish). Returns (bytes forwarded, the receive's exit status or
    None when killed)."""
    pa = subprocess.Popen(send_cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    pb = subprocess.Popen(recv_cmd, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          start_new_session=True)
    sent, deadline = 0, time.monotonic() + timeout
    try:
        while nbytes is None or sent < nbytes:
            want = 1 << 20 if nbytes is None else min(1 << 20, nbytes - sent)
            chunk = pa.stdout.read(want)
            if not chunk or time.monotonic() > deadline:
                break
            pb.stdin.write(chunk)
            sent += len(chunk)
        if nbytes is not None and sent >= nbytes:
            os.kill(pb.pid, signal.SIGKILL)
            pb.wait()
            return sent, None
        pb.stdin.close()
        return sent, pb.wait(timeout=max(1, deadline - time.monotonic()))
    except BrokenPipeError:
        return sent, pb.wait(timeout=60)
    finally:
        for p in (pa, pb):
            if p.poll() is None:
                util.kill_group(p)
                p.wait()


def case_resume(fs, a, scratch):
    """KILLS kills of one receive of a KILL_MIB MiB file, each once a
    random share of the stream (16 MiB at least: two checkpoints) went
    to it, then resumed from the token the target holds."""
    src = os.path.join(scratch, "one")
    os.makedirs(src, exist_ok=True)
    fill_random(os.path.join(src, "big"), a.kill_mib * MIB)
    fs.mkfs_from(src, a.size)
    fs.mount()
    fs.snap("s1")
    rng = random.Random(a.seed)
    step = max(16 * MIB, 2 * a.kill_mib * MIB // a.kills)
    kills, backwards, zero, last, moved = 0, 0, 0, 0, 0
    token = None
    t0 = time.monotonic()
    while True:
        cmd = fs.send("s1") if token is None else [fs.tux3, "send", "--resume", token, fs.mnt]
        cut = rng.randint(16 * MIB, step) if kills < a.kills else None
        sent, rc = cut_receive(cmd, fs.receive(), cut, a.timeout)
        moved += sent
        if rc is not None:
            if rc != 0:
                raise CmdError("the last receive ended with %d" % rc)
            break
        kills += 1
        _, out, _ = run([fs.tux3, "receive", "--resume-token", fs.dst], timeout=60, check=False)
        token = out.strip() or None
        n = token_next(token) if token else 0
        if n <= 1:
            zero += 1
        if n < last:
            backwards += 1
        last = n
    took = time.monotonic() - t0
    # Byte for byte: the received snapshot's file against the source's.
    same = digest(fs.tux3, fs.dst, "s1") == digest(fs.tux3, fs.src, "s1")
    return dict(case="resume", kills=kills, restarted_from_zero=zero, went_backwards=backwards,
                identical=same, seconds=took, stream_moved=moved)


def digest(tux3, dev, snap):
    """sha256 of /big in snapshot `snap` of `dev`, through a read-only mount."""
    mnt = tempfile.mkdtemp(prefix="tux3-sr-")
    run([tux3, "mount", "-o", "ro,snapshot=" + snap, dev, mnt], timeout=60)
    MOUNTS.append(mnt)
    try:
        h = hashlib.sha256()
        with open(os.path.join(mnt, "big"), "rb") as f:
            while True:
                b = f.read(4 * MIB)
                if not b:
                    break
                h.update(b)
        return h.hexdigest()
    finally:
        umount(mnt, tux3)
        os.rmdir(mnt)


def writes_and_snapshots(fs, mnt, n, snapshots):
    """`n` rounds of a write of one of 100 files, each followed by a
    snapshot when `snapshots`; then every snapshot deleted and the files
    removed. Returns the seconds the rounds took."""
    t0 = time.monotonic()
    for i in range(n):
        with open(os.path.join(mnt, "f%d" % (i % 100)), "wb") as f:
            f.write(b"%d" % i * 500)
        if snapshots:
            fs.snap("s%d" % i)
    made = time.monotonic() - t0
    if snapshots:
        for i in range(n):
            run([fs.tux3, "snapshot", "delete", mnt, "s%d" % i], timeout=120, quiet=True)
    for i in range(100):
        p = os.path.join(mnt, "f%d" % i)
        if os.path.exists(p):
            os.unlink(p)
    # One snapshot taken and deleted on either volume: a unify with the
    # trees in memory, which frees what the removals left (a root branch
    # with one child gives way to it), alike on both.
    fs.snap("end")
    run([fs.tux3, "snapshot", "delete", mnt, "end"], timeout=120, quiet=True)
    return made


def case_many(fs, a, scratch):
    """SNAPS snapshots made and deleted with a write before each, then
    fsck, against the same writes with no snapshot on a fresh volume."""
    used = {}
    for snapshots in (False, True):
        fs.fresh(a.size)
        mnt = fs.mount()
        t0 = time.monotonic()
        made = writes_and_snapshots(fs, mnt, a.snaps, snapshots)
        took = time.monotonic() - t0
        umount(mnt, fs.tux3)
        # Reclaim goes on in the background of a mount; an offline open
        # finishes it. Then a mount and unmount, so that both volumes end
        # with a unify behind them alike (fsck counts what the next unify
        # frees apart: `used` takes it off).
        run([fs.tux3, "snapshot", "list", fs.src], timeout=600, quiet=True)
        rc, out, _ = run([fs.tux3, "fsck", fs.src], timeout=600, check=False)
        used[snapshots] = (used_blocks(out), rc, out.strip()[-300:])
        if snapshots:
            result = dict(case="many-snaps", snapshots=a.snaps, seconds=took, create_s=made)
        fs.done()
    result.update(fsck_exit=used[True][1], used_after=used[True][0], used_control=used[False][0],
                  fsck=used[True][2])
    return result


def used_blocks(fsck_out):
    """Blocks in use less those the next unify frees, from fsck's summary."""
    import re
    m = re.search(r"(\d+) blocks used(?: \((\d+) of them)?", fsck_out)
    if not m:
        return None
    return int(m.group(1)) - int(m.group(2) or 0)


# ---- the report ------------------------------------------------------------

def fmt(x, unit=""):
    if x is None:
        return "-"
    if isinstance(x, float):
        return ("%.3g" % x) + unit
    return "{:,}".format(x) + unit


def table(res, a, machine):
    L = ["<!-- Written by bench/sendrecv.py; bench/py/report.py copies it into the",
         "Send and receive section of docs/BENCHMARKS.md. -->",
         "Measured by `bench/sendrecv.py%s` on %s (%s), %s. Source and target volumes on "
         "their own loop devices with direct I/O over sparse images on the machine's disk; "
         "caches dropped before each timed step. tux3 sends from its mount and receives into "
         "an unmounted image; Btrfs sends a read-only snapshot and receives into a second "
         "mounted Btrfs." % (" --quick" if a["quick"] else "", machine.get("cpu", "?"),
                              machine.get("kernel", "?"), a["when"]), ""]
    L += ["| case | tux3 | Btrfs | tux3 / Btrfs (time) |", "|---|---|---|---|"]
    by = {}
    for r in res:
        by.setdefault(r["case"], {})[r["fs"]] = r
    for case, row in by.items():
        t, b = row.get("tux3"), row.get("btrfs")

        def cell(r):
            if not r:
                return "-"
            if r.get("error"):
                return "failed: " + r["error"][:120]
            bits = ["%.3f s" % r["seconds"]] if "seconds" in r else []
            if r.get("runs", 1) > 1:
                bits[0] += " (median of %d: %s)" % (r["runs"], ", ".join(
                    "%.3f" % x for x in r["all_seconds"]))
            if "mb_s" in r and "vs_read" not in r:
                bits.append("%.0f MB/s" % r["mb_s"])
            elif "mb_s" in r:
                bits.append("%.0f MB/s (%.2f× a cold read of the same files, %.0f MB/s)" % (
                    r["mb_s"], r["vs_read"], r["read_mb_s"]))
            if "blocks_read" in r:
                bits.append("%s blocks read, stream %s bytes" % (fmt(r["blocks_read"]),
                                                                  fmt(r["stream_bytes"])))
            if case == "resume":
                bits = ["%d kills, %d restarted from zero, %d went backwards, identical: %s; "
                        "%.1f s in all, %s MiB of stream moved" % (
                            r["kills"], r["restarted_from_zero"], r["went_backwards"],
                            r["identical"], r["seconds"], fmt(r["stream_moved"] // MIB))]
            if case == "many-snaps":
                bits = ["%s snapshots made and deleted in %.0f s; fsck exit %d; blocks in use "
                        "after: %s, after the same writes with no snapshot: %s" % (
                            fmt(r["snapshots"]), r["seconds"], r["fsck_exit"],
                            fmt(r["used_after"]), fmt(r["used_control"]))]
            return ", ".join(bits)
        ratio = "-"
        if t and b and t.get("seconds") and b.get("seconds") and not t.get("error") \
                and not b.get("error"):
            ratio = "%.2f" % (t["seconds"] / b["seconds"])
        L.append("| %s | %s | %s | %s |" % (case.replace("|", "\\|"), cell(t), cell(b), ratio))
    L += ["", "A cold read is every file of the source read through its mount, 4 MiB at a time, "
          "after dropping caches. A pipe alone is `dd if=/dev/zero bs=1M | dd of=/dev/null "
          "bs=1M` moving as many bytes as the large file: what a plain pipe between two "
          "processes carries on this machine with its default 64 KiB buffer (tux3 send and "
          "receive grow theirs to 1 MiB; Btrfs's do not).", ""]
    return "\n".join(L)


def pipe_alone(nbytes, timeout):
    """Seconds `dd if=/dev/zero bs=1M | dd of=/dev/null bs=1M` takes to move
    `nbytes`: what a pipe between two processes carries on this machine,
    with nothing else to do."""
    n = "count=%d" % (nbytes // MIB)
    return pipe(["dd", "if=/dev/zero", "bs=1M", n, "status=none"],
                ["dd", "of=/dev/null", "bs=1M", "status=none"], timeout)


def median_of(runs, fs, once):
    """Run the case `runs` times (fresh volumes each time) and keep, for
    each of its rows, the run with the median time; `runs` notes how many."""
    got = []
    for i in range(runs):
        if i:
            fs.done()
        got.append(once())
    out = []
    for k in range(len(got[0])):
        rows = sorted((g[k] for g in got), key=lambda r: r["seconds"])
        row = dict(rows[len(rows) // 2])
        row["runs"] = len(rows)
        row["all_seconds"] = [round(r["seconds"], 3) for r in rows]
        out.append(row)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fs", default="tux3,btrfs")
    ap.add_argument("--cases", default="full-tree,full-big,incr,resume,many-snaps")
    ap.add_argument("--scratch", default=None)
    ap.add_argument("--out", default=os.path.join(HERE, "sendrecv.md"))
    ap.add_argument("--seed", type=int, default=46)
    ap.add_argument("--snaps", type=int, default=None,
                    help="snapshots of the many-snaps case (10,000; --quick 200)")
    ap.add_argument("--report-only", metavar="JSON", default=None,
                    help="write the table of a saved run (bench/sendrecv.json) and stop")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs of each timed case, the median reported (--quick 1)")
    a = ap.parse_args()
    if a.report_only:
        with open(a.report_only) as f:
            saved = json.load(f)
        text = table(saved["rows"], saved["args"], saved["machine"])
        with open(a.out, "w") as f:
            f.write(text)
        print(text)
        return
    if os.geteuid() != 0:
        sys.exit("bench/sendrecv.py: must run as root (loop devices, mounts, drop_caches)")
    a.tux3 = os.path.join(ROOT, "target", "release", "tux3")
    a.big_mib = 256 if a.quick else 4096
    a.files = 5000 if a.quick else 100000
    a.kills = 10 if a.quick else 100
    a.kill_mib = 64 if a.quick else 1024
    a.snaps = a.snaps or (200 if a.quick else 10000)
    if a.quick:
        a.runs = 1
    a.size = (a.big_mib + 4096) * MIB
    a.timeout = 3600
    for tool in ("losetup", "mkfs.btrfs", "btrfs"):
        if not shutil.which(tool):
            say("installing btrfs-progs")
            run(["apt-get", "install", "-y", "-qq", "btrfs-progs"], timeout=900, check=False)
            break
    if not os.path.exists(a.tux3):
        run(["cargo", "build", "--release"], timeout=1800, cwd=ROOT)
    scratch = tempfile.mkdtemp(prefix="tux3-sendrecv.", dir=a.scratch)
    res = []

    def on_signal(signum, _):
        raise KeyboardInterrupt()
    signal.signal(signal.SIGTERM, on_signal)
    try:
        secs = sorted(pipe_alone(a.big_mib * MIB, a.timeout) for _ in range(a.runs))
        res.append(dict(case="a pipe alone (dd | dd, %d MiB)" % a.big_mib, fs="tux3",
                        seconds=secs[len(secs) // 2], mb_s=a.big_mib * MIB / secs[len(secs) // 2] / 1e6,
                        runs=len(secs), all_seconds=[round(x, 3) for x in secs]))
        trees = {"full-tree": "/usr/include"}
        big = os.path.join(scratch, "bigtree")
        for name in a.fs.split(","):
            fs = Tux3(a, scratch) if name == "tux3" else Btrfs(a, scratch)
            for case in a.cases.split(","):
                if case in ("resume", "many-snaps") and name != "tux3":
                    continue
                say("%s: %s" % (name, case))
                try:
                    if case == "full-tree":
                        r = median_of(a.runs, fs, lambda: [case_full(
                            fs, a, trees[case], case, tree_bytes(trees[case]))])
                    elif case == "full-big":
                        if not os.path.isdir(big):
                            os.makedirs(big)
                            fill_random(os.path.join(big, "big"), a.big_mib * MIB)
                        r = median_of(a.runs, fs, lambda: [case_full(
                            fs, a, big, "full-big (%d MiB)" % a.big_mib, a.big_mib * MIB)])
                    elif case == "incr":
                        r = median_of(a.runs, fs, lambda: case_incr(fs, a, scratch))
                    elif case == "resume":
                        r = [case_resume(fs, a, scratch)]
                    else:
                        r = [case_many(fs, a, scratch)]
                except (CmdError, OSError, ValueError, subprocess.SubprocessError) as e:
                    r = [dict(case=case, error=str(e))]
                finally:
                    fs.done()
                for x in r:
                    x["fs"] = name
                    say("  %s" % json.dumps(x))
                res.extend(r)
    except KeyboardInterrupt:
        say("interrupted")
        cleanup()
        sys.exit(130)
    finally:
        cleanup()
        shutil.rmtree(scratch, ignore_errors=True)
    machine = util.machine(a.scratch or tempfile.gettempdir(), ROOT)
    args = dict(quick=a.quick, when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    text = table(res, args, machine)
    with open(a.out, "w") as f:
        f.write(text)
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(dict(rows=res, args=args, machine=machine), f, indent=1)
    print(text)


if __name__ == "__main__":
    main()
