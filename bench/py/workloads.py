"""The workloads. Each takes a Ctx and a mounted filesystem and returns rows,
one per parameter. `measure` wraps one timed step: it reads the loop
device's counters and the filesystem daemon's CPU time before and after,
then runs syncfs and reads the counters again (so a row has the I/O of the
timed region alone and the I/O including everything it left dirty). On a
FUSE mount it also counts the requests the kernel sent to the daemon in the
timed region, by opcode (fusetrace.py).

A row's `figure`, `unit` and `better` name the number its report table
shows for it.
"""

import json
import os
import re
import time

from fusetrace import connection
from util import (CmdError, cpu_ticks, disk_stat, finish, last_json, proc_cpu, run, stat_delta,
                  start, steal_pct)

MIB = 1 << 20


class Ctx:
    def __init__(self, quick, bindir, loadfile):
        self.quick, self.bindir, self.loadfile = quick, bindir, loadfile
        q = quick
        # Quick mode is a smoke test that must stay within a few minutes for
        # all seven filesystems: small counts and short timed runs.
        self.syncs = [(1, 200), (10, 10), (100, 10)] if q else \
            [(1, 1000), (10, 10), (100, 10), (1000, 10), (10000, 10)]
        self.rename_cycles = 1000 if q else 10000
        self.dbench_clients = [1, 8] if q else [1, 8, 16, 32]
        self.dbench_secs = 2 if q else 10  # dbench 4 reports nothing for -t 1
        # fsync-load: probe every lat_every_ms for lat_secs (600 samples in a full
        # run, so p99 is the 6th worst rather than about the worst).
        self.lat_secs = 2 if q else 30
        self.lat_every_ms = 100 if q else 50
        self.writer_bound = (512 if q else 4096) * MIB
        self.meta_flat = 20000 if q else 1000000
        self.meta_tree = 5000 if q else 100000
        self.stream_size = 64 * MIB if q else 4096 * MIB
        self.rand_size = 64 * MIB if q else 1024 * MIB
        self.rand_secs = 1 if q else 10
        self.step_timeout = 120 if q else 1800
        # Each rename and metadata step stops after this many seconds (a
        # million entries in one directory is quadratic on some filesystems);
        # rates are over the operations done.
        self.cap = 2 if q else 15
        # A syncs step stops starting fsyncs after this many seconds (ext4
        # needs over 10 minutes for 10,000 tasks x 10 here); the figure is
        # fsyncs per second over the fsyncs done, so capped and complete
        # steps compare.
        self.syncs_cap = 20 if q else 30
        self.engine_dbench_secs = 1 if q else 10
        # snapshots (snapshots.py): creates timed per step, the snapshot
        # count of the many-snapshots steps, small files before a step, the
        # data a snapshot alone holds when deleted under the fsync probe,
        # the idle probe's length and every probe's interval, listings and
        # mounts timed, deletes timed; the whole workload's time budget on
        # one filesystem and each command's timeout.
        self.snap_creates = 20 if q else 200
        self.snap_many = 200 if q else 10000
        self.snap_files = 5000 if q else 100000
        self.snap_reclaim_bytes = (64 if q else 1024) * MIB
        self.snap_idle_secs = 1.5 if q else 20
        self.snap_probe_ms = 20
        self.snap_lists = 3 if q else 5
        self.snap_mounts = 1 if q else 3
        self.snap_deletes = 10 if q else 100
        self.snap_budget = 15 if q else 4 * 3600
        self.snap_cmd_timeout = 20 if q else 300
        self.snap_reclaim_timeout = 20 if q else 900
        self.tux3 = None  # target/release/tux3
        # syncfs() runs `tux3 sync` after `sync -f` on tux3 (the mount's
        # commit_cmd); recorded so that the report of a run says so.
        self.commit_tux3 = True
        self.env = None  # the fsetup.Env (the snapshot workload remounts)
        # Quick mode formats each filesystem once for all workloads.
        self.fresh_per_workload = not q

        self.on_row = None  # called with each row as soon as it is measured
        # A fusetrace.FuseTrace counting the FUSE requests of each step on a
        # FUSE mount, or None.
        self.fuse_trace = None

    def bin(self, name):
        return os.path.join(self.bindir, name)


def emit(ctx, rows, row):
    rows.append(row)
    if ctx.on_row:
        ctx.on_row(row)


def syncfs(m):
    """Everything written so far on the device: `sync -f`, and on tux3 its
    own sync, since syncfs does not reach a FUSE server. Without it a step's
    commit would land in the next step's timed region (a tree create's
    47,000 blocks in the `find` after it)."""
    run(["sync", "-f", m.mnt], timeout=300)
    if m.commit_cmd:
        run(m.commit_cmd, timeout=300)


def drop_caches(m):
    syncfs(m)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def measure(ctx, m, workload, param, body, fsyncs=None, sync_after=True):
    """Run `body()` (returns a dict with at least `seconds`) as one step."""
    row = {"fs": m.fs, "workload": workload, "param": param, "error": ""}
    trace = ctx.fuse_trace if ctx.fuse_trace and ctx.fuse_trace.dir else None
    conn = connection(m.mnt) if trace else None
    s0, c0, t0 = disk_stat(m.dev), proc_cpu(m.pid), cpu_ticks()
    if conn is not None:
        trace.start(conn)
    try:
        res = body()
    except CmdError as e:
        res = {"error": str(e)[:400]}
    finally:
        if conn is not None:
            trace.stop()
    s1, c1, t1 = disk_stat(m.dev), proc_cpu(m.pid), cpu_ticks()
    steal = steal_pct(t0, t1)
    if steal is not None:
        row["steal_pct"] = round(steal, 2)
    if sync_after:
        try:
            syncfs(m)
        except CmdError as e:
            res.setdefault("error", "syncfs: %s" % str(e)[:200])
    s2 = disk_stat(m.dev)
    row.update(res)
    if conn is not None:
        row.update(trace.collect(conn))
    d, ds = stat_delta(s0, s1), stat_delta(s0, s2)
    if d:
        row.update(dev_writes=d["writes"], dev_blocks=d["sectors"] / 8.0,
                   dev_flushes=d["flushes"], dev_reads=d["reads"],
                   dev_writes_all=ds["writes"], dev_blocks_all=ds["sectors"] / 8.0,
                   dev_flushes_all=ds["flushes"])
    if c0 is not None and c1 is not None:
        row["fs_cpu_s"] = round(c1 - c0, 3)
    n = fsyncs if fsyncs is not None else row.get("fsyncs")
    if d and n:
        row["fsyncs"] = n
        row["blocks_per_fsync"] = d["sectors"] / 8.0 / n
        row["writes_per_fsync"] = d["writes"] / n
        if d["flushes"] is not None:
            row["flushes_per_fsync"] = d["flushes"] / n
    if row.get("ops") and row.get("seconds"):
        row["ops_per_s"] = row["ops"] / row["seconds"]
    return row


def _json_step(cmd, timeout):
    rc, out, err = run(cmd, timeout=timeout, check=False)
    res = last_json(out)
    if rc != 0:
        res["error"] = ("exit %d: %s" % (rc, err.strip()[-300:])).strip()
    return res


# ---- syncs ------------------------------------------------------------------

def syncs(ctx, m):
    rows = []
    for tasks, steps in ctx.syncs:
        d = os.path.join(m.mnt, "syncs-%d" % tasks)
        os.mkdir(d)

        def body():
            r = _json_step([ctx.bin("syncs"), d, tasks, steps, ctx.syncs_cap], ctx.step_timeout)
            r["ops"] = r.get("fsyncs", 0)
            return r
        row = measure(ctx, m, "syncs", "%dx%d" % (tasks, steps), body)
        row.update(tasks=tasks, steps=steps, figure=row.get("ops_per_s"), unit="fsyncs/s",
                   better="higher")
        emit(ctx, rows, row)
    return rows


# ---- rename cycle -------------------------------------------------------------

def rename(ctx, m):
    rows = []
    for do_fsync in (1, 0):
        d = os.path.join(m.mnt, "rename-%d" % do_fsync)
        os.mkdir(d)
        n = ctx.rename_cycles

        def body():
            r = _json_step([ctx.bin("rename_cycle"), d, n, 16000, do_fsync, ctx.cap],
                           ctx.step_timeout)
            r["ops"] = r.get("cycles", 0)
            if do_fsync:
                r["fsyncs"] = r["ops"]
            return r
        row = measure(ctx, m, "rename", "%s%d x 16000 B, %s" % (
            "≤" if ctx.cap else "", n, "fsync" if do_fsync else "no fsync"), body)
        row.update(figure=row.get("ops_per_s"), unit="cycles/s", better="higher")
        emit(ctx, rows, row)
    return rows


# ---- dbench -------------------------------------------------------------------

def dbench(ctx, m):
    rows = []
    for sync in (False, True):
        for clients in ctx.dbench_clients:
            d = os.path.join(m.mnt, "dbench")
            os.makedirs(d, exist_ok=True)
            cmd = ["dbench", "-D", d, "-t", ctx.dbench_secs, "-c", ctx.loadfile] + \
                (["-s"] if sync else []) + [clients]

            def body():
                rc, out, err = run(cmd, timeout=ctx.dbench_secs * 3 + 120, check=False)
                t = re.search(r"Throughput ([\d.]+) MB/sec.*max_latency=([\d.]+) ms", out)
                if not t:
                    raise CmdError("dbench: no result (exit %d): %s" % (rc, (err or out)[-300:]))
                ops = re.findall(r"^\s*[A-Za-z]+\s+(\d+)\s+[\d.]+\s+[\d.]+\s*$", out, re.M)
                return {"seconds": ctx.dbench_secs, "mb_s": float(t.group(1)),
                        "lat_max_ms": float(t.group(2)), "ops": sum(map(int, ops))}
            row = measure(ctx, m, "dbench", "%d client%s%s" % (clients, "" if clients == 1 else "s",
                                                               ", -s" if sync else ""), body)
            row.update(clients=clients, sync=sync, figure=row.get("mb_s"), unit="MB/s",
                       better="higher")
            emit(ctx, rows, row)
    return rows


# ---- fsync latency under a background writer ----------------------------------------

def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def fsync_load(ctx, m):
    rows = []
    for loaded in (False, True):
        probe_file = os.path.join(m.mnt, "probe-%d" % loaded)
        stream_file = os.path.join(m.mnt, "stream")

        def body():
            writer, r_w = None, {}
            if loaded:
                writer = start([ctx.bin("fsync_latency"), "writer", stream_file,
                                ctx.writer_bound, ctx.lat_secs + 2])
                time.sleep(0.5)  # let the stream get going
            try:
                r = _json_step([ctx.bin("fsync_latency"), "probe", probe_file, ctx.lat_secs, ctx.lat_every_ms],
                               ctx.lat_secs + ctx.step_timeout)
            finally:
                if writer:
                    try:
                        _, out, _ = finish(writer, ctx.lat_secs + 60)
                        r_w = last_json(out)
                    except CmdError:
                        pass
            lat = r.pop("lat_ms", [])
            r.update(ops=len(lat), seconds=ctx.lat_secs, lat_ms=lat,
                     lat_p50_ms=percentile(lat, 50), lat_p99_ms=percentile(lat, 99),
                     lat_max_ms=max(lat) if lat else None)
            if loaded:
                r["writer_mb_s"] = r_w.get("bytes", 0) / MIB / max(r_w.get("seconds", 1), 1e-9)
            return r
        row = measure(ctx, m, "fsync-load", "with writer" if loaded else "idle", body)
        row.update(loaded=loaded, figure=row.get("lat_p99_ms"), unit="ms p99", better="lower")
        emit(ctx, rows, row)
        try:
            os.unlink(stream_file)
        except OSError:
            pass
    return rows


# ---- metadata at scale --------------------------------------------------------------

def meta(ctx, m):
    rows = []
    made = {}
    steps = [("flat", ctx.meta_flat, p) for p in ("create", "stat", "unlink")] + \
            [("tree", ctx.meta_tree, p) for p in ("create", "find", "read", "delete")]
    for kind, n, phase in steps:
        d = os.path.join(m.mnt, kind)
        if phase == "create":
            os.mkdir(d)
        else:
            drop_caches(m)  # cold cache: the structure on disk, not the dcache
        count = made.get(kind, n)

        def body():
            if phase == "find":
                t0 = time.monotonic()
                _, out, _ = run(["find", d], timeout=ctx.step_timeout, quiet=True)
                return {"seconds": time.monotonic() - t0, "ops": out.count("\n")}
            r = _json_step([ctx.bin("meta"), kind, d, count, phase, ctx.cap], ctx.step_timeout)
            if phase == "create":
                made[kind] = r.get("ops", 0)
            return r
        row = measure(ctx, m, "meta", "%s %s %s%d" % (kind, phase, "≤" if ctx.cap else "", n), body)
        row.update(figure=row.get("ops_per_s"), unit="ops/s", better="higher")
        emit(ctx, rows, row)
    return rows


# ---- streaming and random I/O with fio ------------------------------------------------

def _fio(ctx, m, name, extra, timeout):
    cmd = ["fio", "--name=" + name, "--filename=" + os.path.join(m.mnt, "fio.dat"),
           "--ioengine=psync", "--fallocate=none", "--output-format=json"] + extra
    rc, out, err = run(cmd, timeout=timeout, check=False)
    try:
        j = json.loads(out[out.index("{"):])
        job = j["jobs"][0]
    except (ValueError, KeyError, IndexError):
        raise CmdError("fio %s: exit %d: %s" % (name, rc, (err or out)[-300:]))
    # An I/O error ends fio's job early, with figures for what it did: the
    # row says so instead of showing them as a speed.
    if job.get("error"):
        raise CmdError("fio %s: error %d (%s): %s" % (name, job["error"], os.strerror(job["error"]),
                                                     (err or "").strip()[-300:]))
    return job


# Cold sequential reads per filesystem in the stream workload (the row is
# their median).
STREAM_READS = 3


def stream(ctx, m):
    rows = []
    size = ctx.stream_size
    for phase in ("write", "read"):
        def body():
            job = _fio(ctx, m, "seq" + phase, ["--rw=" + phase, "--bs=1M", "--size=%d" % size,
                                               "--end_fsync=1"], ctx.step_timeout * 3)
            io = job[phase]
            secs = io["runtime"] / 1000.0 or 1e-9
            return {"seconds": secs, "mb_s": io["io_bytes"] / MIB / secs,
                    "ops": io["total_ios"]}
        param = "seq %s %d MiB" % (phase, size // MIB)
        if phase == "write":
            row = measure(ctx, m, "stream", param, body)
        else:
            # A cold read's speed swings with the machine's memory from one
            # read to the next (bench/read-copy.md): the row is the median
            # of STREAM_READS reads, each from a cold cache, with that
            # read's own counters, and lists every read's speed.
            tries = []
            for _ in range(1 if ctx.quick else STREAM_READS):
                drop_caches(m)
                tries.append(measure(ctx, m, "stream", param, body))
            failed = [r for r in tries if r.get("error") or r.get("mb_s") is None]
            if failed:
                row = failed[0]
            else:
                tries.sort(key=lambda r: r["mb_s"])
                row = tries[len(tries) // 2]
                row["reads_mb_s"] = [round(r["mb_s"], 1) for r in tries]
        row.update(figure=row.get("mb_s"), unit="MB/s", better="higher")
        emit(ctx, rows, row)
    drop_caches(m)

    def rand():
        job = _fio(ctx, m, "randrw", ["--rw=randrw", "--bs=4k", "--size=%d" % ctx.rand_size,
                                      "--time_based", "--runtime=%d" % ctx.rand_secs,
                                      "--end_fsync=1"], ctx.rand_secs + ctx.step_timeout)
        return {"seconds": ctx.rand_secs, "read_iops": job["read"]["iops"],
                "write_iops": job["write"]["iops"],
                "ops": job["read"]["total_ios"] + job["write"]["total_ios"]}
    row = measure(ctx, m, "stream", "rand 4k r/w %d MiB" % (ctx.rand_size // MIB), rand)
    if "read_iops" in row:
        row["figure"] = row["read_iops"] + row["write_iops"]
    row.update(unit="IOPS", better="higher")
    emit(ctx, rows, row)
    return rows


from snapshots import snapshots  # noqa: E402

WORKLOADS = {"syncs": syncs, "rename": rename, "dbench": dbench, "fsync-load": fsync_load,
             "meta": meta, "stream": stream, "snapshots": snapshots}
ORDER = ["syncs", "rename", "dbench", "fsync-load", "meta", "stream", "snapshots", "engine"]
