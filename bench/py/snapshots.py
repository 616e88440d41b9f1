"""The snapshot workload: read-only snapshots of tux3 (of the whole volume,
through its mount: `tux3 snapshot ...` on a path of the mount, which the
mount's server carries out through an ioctl) against Btrfs subvolume
snapshots (`btrfs subvolume snapshot -r` of a subvolume `vol` made on the
fresh Btrfs, into `snaps/`). Every create, delete and list is one whole
command, timed from its start to its exit as a script would see it.

On one fresh filesystem, in this order:

  create-empty    C creates on the empty volume
  reclaim         D bytes in files of 64 KiB, a snapshot, every file
                  overwritten (so the snapshot alone holds D), then the
                  fsync probe (fsync_latency: 4 KiB append+fsync of a
                  small file every 20 ms) idle, and again while that
                  snapshot is deleted and its space reclaimed
  create-files    F small files (bench/c/meta tree create), then C creates
  delete          K deletes of those, each timed and followed by the wait
                  for its space (tux3: `tux3 snapshot list --json` polled
                  until the row is gone; Btrfs: `btrfs subvolume sync`)
  fill            creates until S snapshots exist (timed as a whole)
  create-many     C creates with S present
  list            the listing of all of them, L times
  mount           unmount, drop caches, mount: M times (also at the start,
                  on the empty volume)
  delete-many     K deletes back to back with S present, each timed, then
                  one wait for all of them (one listing of S snapshots may
                  take seconds, too long a poll for each delete)

Only tux3 (its first mount, not tux3-devfuse) and Btrfs run it. The whole
workload has a time budget (ctx.snap_budget): the fill stops early at it and
later steps are skipped, noted in the rows; each command has its own
timeout.
"""

import json
import os
import signal
import time

from util import CmdError, finish, last_json, run, say, start

MIB = 1 << 20
SNAPSHOT_FS = ("tux3", "btrfs")
DATA_FILE = 64 << 10


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class Budget(Exception):
    pass


class Tux3Snaps:
    """tux3: snapshots of the whole volume, through its mount."""

    def __init__(self, ctx, m):
        self.ctx, self.m, self.tux3 = ctx, m, ctx.tux3
        self.data = m.mnt

    def create_cmd(self, name):
        return [self.tux3, "snapshot", "create", self.m.mnt, name]

    def delete_cmd(self, name):
        return [self.tux3, "snapshot", "delete", self.m.mnt, name]

    def list_cmd(self):
        return [self.tux3, "snapshot", "list", self.m.mnt]

    def listing(self):
        _, out, _ = run([self.tux3, "snapshot", "list", self.m.mnt, "--json"],
                        timeout=self.ctx.snap_cmd_timeout, quiet=True)
        return json.loads(out)

    def commit(self, name, nbytes, deadline):
        """Wait until the snapshot `name` alone holds `nbytes` (the
        overwrites are committed: `sync -f` does not make a FUSE server
        commit, its own commit, every 5 s, does). Returns the wait."""
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            s = next((s for s in self.listing() if s["name"] == name), None)
            if s and s["unique_bytes"] >= nbytes:
                return time.monotonic() - t0
            time.sleep(0.2)
        raise CmdError("snapshot %s did not come to hold %d bytes alone" % (name, nbytes))

    def wait_gone(self, names, timeout):
        """Poll the listing until none of `names` is in it; returns the
        extents left to reclaim at the first poll (0 when they were gone
        already)."""
        names = set(names)
        deadline = time.monotonic() + timeout
        left = None
        while True:
            rows = [s for s in self.listing() if s["name"] in names]
            if left is None:
                left = sum(s.get("reclaim_left", 0) for s in rows)
            if not rows:
                return left
            if time.monotonic() > deadline:
                raise CmdError("snapshot %s still listed %ss after its delete" % (
                    rows[0]["name"], timeout))
            time.sleep(0.02)


class BtrfsSnaps:
    """Btrfs: read-only snapshots of the subvolume `vol`."""

    def __init__(self, ctx, m):
        self.ctx, self.m = ctx, m
        self.data = os.path.join(m.mnt, "vol")
        self.snaps = os.path.join(m.mnt, "snaps")
        run(["btrfs", "subvolume", "create", self.data], timeout=60)
        os.mkdir(self.snaps)

    def create_cmd(self, name):
        return ["btrfs", "subvolume", "snapshot", "-r", self.data, os.path.join(self.snaps, name)]

    def delete_cmd(self, name):
        # -c: commit after the deletion, so that it is durable when the
        # command returns, as a tux3 delete is.
        return ["btrfs", "subvolume", "delete", "-c", os.path.join(self.snaps, name)]

    def list_cmd(self):
        return ["btrfs", "subvolume", "list", self.m.mnt]

    def commit(self, name, nbytes, deadline):
        return 0.0  # sync -f commits the transaction

    def wait_gone(self, names, timeout):
        run(["btrfs", "subvolume", "sync", self.m.mnt], timeout=timeout, quiet=True)
        return None


def timed(cmd, timeout, quiet=True):
    t0 = time.monotonic()
    run(cmd, timeout=timeout, quiet=quiet)
    return time.monotonic() - t0


def snapshots(ctx, m):
    if m.fs not in SNAPSHOT_FS:
        return []
    env = ctx.env
    rows = []
    t_start = time.monotonic()
    deadline = t_start + ctx.snap_budget
    s = Tux3Snaps(ctx, m) if m.fs == "tux3" else BtrfsSnaps(ctx, m)
    count = [0]  # snapshots taken
    T = ctx.snap_cmd_timeout

    def shown(cmd):
        """A command as the report shows it: MNT, LOOP, tux3."""
        return cmd.replace(ctx.tux3, "tux3").replace(m.mnt, "MNT").replace(m.dev or "?", "LOOP")

    def add(step, param, cmd, extra):
        row = {"fs": m.fs, "workload": "snapshots", "step": step, "param": param,
               "cmd": shown(cmd), "error": ""}
        row.update(extra)
        rows.append(row)
        if ctx.on_row:
            ctx.on_row(row)
        return row

    def lat_row(step, param, cmd, secs, **kw):
        ms = [x * 1e3 for x in secs]
        return add(step, param, cmd, dict(
            ops=len(ms), seconds=sum(secs), lat_ms=[round(x, 3) for x in ms],
            lat_p50_ms=percentile(ms, 50), lat_p99_ms=percentile(ms, 99),
            lat_max_ms=max(ms) if ms else None, figure=percentile(ms, 50), unit="ms",
            better="lower", **kw))

    def check_budget(what):
        if time.monotonic() > deadline:
            raise Budget("time budget of %ss spent before %s" % (ctx.snap_budget, what))

    def creates(n, quiet=True):
        out = []
        for _ in range(n):
            count[0] += 1
            out.append(timed(s.create_cmd("s%06d" % count[0]), T, quiet))
        return out

    def fsync_probe(path, secs, until=None):
        """The probe for `secs`, or until `until()` returns (then ended by
        SIGTERM); returns (latencies in ms, start times, until's result)."""
        p = start([ctx.bin("fsync_latency"), "probe", path, secs, ctx.snap_probe_ms, "t"])
        got = None
        try:
            if until:
                time.sleep(0.5)
                got = until()
                time.sleep(0.2)
                p.send_signal(signal.SIGTERM)
            _, out, _ = finish(p, secs + 60)
        finally:
            if p.poll() is None:
                p.kill()
        r = last_json(out)
        return r.get("lat_ms", []), r.get("t", []), got

    base = ["create-empty", "reclaim", "create-files", "delete", "fill", "create-many",
            "list", "mount", "delete-many"]
    done = []
    try:
        # mount time of the empty volume, for reference
        secs = [env.remount(m, timeout=T) for _ in range(ctx.snap_mounts)]
        lat_row("mount-empty", "mount, empty volume", " ".join(env.mount_cmd(m)), secs)

        lat_row("create-empty", "create, empty volume", " ".join(s.create_cmd("NAME")),
                creates(ctx.snap_creates, quiet=False))
        done.append("create-empty")

        # -- a large reclaim under the fsync probe --
        check_budget("the reclaim")
        rdir = os.path.join(s.data, "reclaim")
        os.mkdir(rdir)
        nfiles = ctx.snap_reclaim_bytes // DATA_FILE
        for fill in (b"a", b"b"):
            buf = fill * DATA_FILE
            for i in range(nfiles):
                fd = os.open(os.path.join(rdir, "f%06d" % i), os.O_WRONLY | os.O_CREAT, 0o644)
                try:
                    os.pwrite(fd, buf, 0)
                finally:
                    os.close(fd)
            run(["sync", "-f", m.mnt], timeout=300)
            if fill == b"a":
                run(s.create_cmd("reclaim"), timeout=T)
        waited = s.commit("reclaim", int(ctx.snap_reclaim_bytes * 0.9), time.monotonic() + 120)
        probe_file = os.path.join(s.data, "probe")
        lat, _, _ = fsync_probe(probe_file + "-idle", ctx.snap_idle_secs)
        idle = add("fsync-idle", "fsync p99, idle", "fsync_latency probe FILE %s %s t" % (
            ctx.snap_idle_secs, ctx.snap_probe_ms), dict(
                ops=len(lat), seconds=ctx.snap_idle_secs, figure=percentile(lat, 99), unit="ms",
                better="lower", lat_p50_ms=percentile(lat, 50), lat_p99_ms=percentile(lat, 99),
                lat_max_ms=max(lat) if lat else None))
        marks = {}

        def delete_and_wait():
            marks["t0"] = time.monotonic()
            run(s.delete_cmd("reclaim"), timeout=T)
            marks["t1"] = time.monotonic()
            marks["left"] = s.wait_gone(["reclaim"], ctx.snap_reclaim_timeout)
            marks["t2"] = time.monotonic()
        lat, at, _ = fsync_probe(probe_file + "-reclaim", ctx.snap_reclaim_timeout + 30,
                                 delete_and_wait)
        during = [x for x, t in zip(lat, at) if marks["t0"] <= t <= marks["t2"]]
        mib = ctx.snap_reclaim_bytes // MIB
        what = "%s MiB in %s files" % ("{:,}".format(mib), "{:,}".format(nfiles))
        add("reclaim-delete", "delete, holding %s" % what, " ".join(s.delete_cmd("NAME")), dict(
            ops=1, seconds=marks["t1"] - marks["t0"], figure=(marks["t1"] - marks["t0"]) * 1e3,
            unit="ms", better="lower", commit_wait_s=round(waited, 2)))
        add("reclaim-space", "space back, %s" % what, "", dict(
            ops=1, seconds=marks["t2"] - marks["t0"], figure=(marks["t2"] - marks["t0"]) * 1e3,
            unit="ms", better="lower", reclaim_left=marks.get("left")))
        p99 = percentile(during, 99)
        add("fsync-reclaim", "fsync p99, during that reclaim", "", dict(
            ops=len(during), seconds=marks["t2"] - marks["t0"], figure=p99, unit="ms",
            better="lower", lat_p50_ms=percentile(during, 50), lat_p99_ms=p99,
            lat_max_ms=max(during) if during else None,
            vs_idle=(p99 / idle["figure"]) if p99 and idle.get("figure") else None))
        run(["rm", "-rf", rdir], timeout=600)
        run(["sync", "-f", m.mnt], timeout=300)
        done.append("reclaim")

        # -- creation with many files --
        check_budget("the files")
        fdir = os.path.join(s.data, "files")
        os.mkdir(fdir)
        r = last_json(run([ctx.bin("meta"), "tree", fdir, ctx.snap_files, "create", 0],
                          timeout=ctx.step_timeout)[1])
        run(["sync", "-f", m.mnt], timeout=300)
        nf = "{:,}".format(r.get("ops", 0))
        lat_row("create-files", "create, %s files" % nf, " ".join(s.create_cmd("NAME")),
                creates(ctx.snap_creates), files=r.get("ops"), files_s=r.get("seconds"))
        done.append("create-files")

        # -- deletes, each waited for (the snapshots just taken) --
        check_budget("the deletes")
        present = "{:,}".format(count[0])  # "reclaim" is gone already
        ret, back = [], []
        for i in range(min(ctx.snap_deletes, ctx.snap_creates)):
            name = "s%06d" % (count[0] - i)
            t0 = time.monotonic()
            run(s.delete_cmd(name), timeout=T, quiet=True)
            t1 = time.monotonic()
            s.wait_gone([name], T)
            ret.append(t1 - t0)
            back.append(time.monotonic() - t0)
        lat_row("delete", "delete, %s snapshots" % present, " ".join(s.delete_cmd("NAME")), ret)
        lat_row("delete-space", "space back after a delete, %s snapshots" % present,
                "tux3 snapshot list MNT --json (polled)" if m.fs == "tux3"
                else "btrfs subvolume sync MNT", back)
        gone = set(range(count[0] - len(ret) + 1, count[0] + 1))
        done.append("delete")

        # -- many snapshots --
        want = ctx.snap_many
        t0 = time.monotonic()
        n0 = count[0]
        stopped = ""
        while count[0] - len(gone) < want:
            if time.monotonic() > deadline:
                stopped = "stopped at the time budget (%s s)" % ctx.snap_budget
                break
            creates(1)
        took = time.monotonic() - t0
        made = count[0] - n0
        add("fill", "take %s snapshots (to %s)" % ("{:,}".format(made),
                                                    "{:,}".format(count[0] - len(gone))),
            " ".join(s.create_cmd("NAME")) + " (each)", dict(
                ops=made, seconds=took, figure=took, unit="s", better="lower",
                snapshots=count[0] - len(gone), error=stopped))
        done.append("fill")
        many = "{:,}".format(count[0] - len(gone))
        lat_row("create-many", "create, %s snapshots" % many, " ".join(s.create_cmd("NAME")),
                creates(ctx.snap_creates))
        done.append("create-many")
        many = "{:,}".format(count[0] - len(gone))

        check_budget("the listing")
        secs = [timed(s.list_cmd(), T) for _ in range(ctx.snap_lists)]
        lat_row("list", "list, %s snapshots" % many, " ".join(s.list_cmd()), secs)
        done.append("list")

        secs = [env.remount(m, timeout=T) for _ in range(ctx.snap_mounts)]
        lat_row("mount", "mount, %s snapshots" % many, " ".join(env.mount_cmd(m)), secs)
        done.append("mount")

        # -- deletes back to back, then one wait for all of them (with this
        # many snapshots one listing, hence one poll, may take seconds) --
        check_budget("the deletes with many snapshots")
        names = ["s%06d" % (count[0] - i) for i in range(ctx.snap_deletes)]
        ret = []
        t0 = time.monotonic()
        for name in names:
            ret.append(timed(s.delete_cmd(name), T))
        t1 = time.monotonic()
        s.wait_gone(names, ctx.snap_reclaim_timeout)
        t2 = time.monotonic()
        lat_row("delete-many", "delete, %s snapshots" % many, " ".join(s.delete_cmd("NAME")), ret)
        add("delete-many-space", "space back after %d deletes, %s snapshots" % (len(names), many),
            "tux3 snapshot list MNT --json (polled)" if m.fs == "tux3"
            else "btrfs subvolume sync MNT", dict(
                ops=len(names), seconds=t2 - t0, figure=(t2 - t0) * 1e3, unit="ms",
                better="lower", wait_s=t2 - t1))
        done.append("delete-many")
    except Budget as e:
        add("budget", "not run: %s" % ", ".join(x for x in base if x not in done), "", dict(
            error=str(e)))
    except (CmdError, OSError, ValueError) as e:
        add("failed", "failed after: %s" % (", ".join(done) or "nothing"), "", dict(
            error=str(e)[:400]))
    say("%s: snapshots workload took %.1f s" % (m.fs, time.monotonic() - t_start))
    return rows
