"""docs/BENCHMARKS.md from a run's results: the machine and versions, the
exact commands, one table per workload with each filesystem's figure and
tux3's ratio to the best peer, blocks and flushes per fsync, the CPU time
and FUSE requests per operation of the filesystem daemons, the engine
without FUSE against tmpfs, and what could not be run. Results from before
the FUSE requests were counted still make a report (it says they were not).
"""

import os

from fsetup import EXT4_OPTS, FILESYSTEMS, LABEL, PEERS
from util import CALM_PCT, CALM_TIMEOUT, STEAL_MARK

WORKLOAD_TEXT = {
    "syncs": ("Parallel small fsyncs",
              "T processes each append 1 KiB to their own file and fsync it, N times "
              "(`TxN`); all start together at a barrier. Fsyncs per second from the "
              "barrier to the last exit, higher is better. A step stops starting fsyncs "
              "after its cap (see the commands below); a cell marked * is such a step, "
              "over the fsyncs it did. The seconds table below is the same steps' time."),
    "rename": ("Rename cycle",
               "open(O_CREAT|O_TRUNC) a temp file, write 16,000 bytes, fsync (or not), "
               "close, rename over the target. Cycles per second, higher is better."),
    "dbench": ("dbench",
               "dbench 4 with its NetBench loadfile (client.txt) for a fixed time; `-s` "
               "opens every file O_SYNC. MB/s as dbench reports it, higher is better."),
    "fsync-load": ("fsync latency under a background writer",
                   "Every 50 ms for 30 s (600 samples; quick mode: every 100 ms for 2 s) append "
                   "4 KiB to a small file and fsync it; p99 latency in "
                   "ms (lower is better), idle and while another process streams buffered "
                   "1 MiB writes to a large file (starting writeback every 32 MiB)."),
    "meta": ("Metadata at scale",
             "`flat`: create, stat and unlink N empty files in one directory. `tree`: N "
             "small files (1..4096 bytes) in a two-level tree: create, `find`, read all, "
             "delete. Caches are dropped before stat, find and read, after `sync -f` "
             "and, on tux3 since 2026-11-28, `tux3 sync` (syncfs does not reach a FUSE "
             "server: before, the commit of the tree create, 47,000 blocks, was written "
             "during the `find` after it, at 0.32x of the best peer). Operations per "
             "second, higher is better."),
    "stream": ("Streaming and random I/O (fio)",
               "Sequential 1 MiB writes (with a final fsync) and reads (cold cache; the "
               "median of three reads, each after dropping the caches) of one file, MB/s; then 4 KiB random reads and writes (50/50, buffered) over part "
               "of it for a fixed time, total IOPS. Higher is better."),
}


def fmt(v, unit=""):
    if v is None or v == "":
        return "—"
    if isinstance(v, float):
        if v >= 1000:
            return "{:,.0f}".format(v)
        if v >= 100:
            return "%.0f" % v
        if v >= 10:
            return "%.1f" % v
        if v >= 0.1:
            return "%.2f" % v
        return "%.3g" % v
    return str(v)


def ratio(rows_by_fs, row_t):
    """tux3 against the best peer, >1 meaning tux3 is better."""
    t = row_t.get("figure") if row_t else None
    peers = [(fs, r.get("figure")) for fs, r in rows_by_fs.items()
             if fs in PEERS and isinstance(r.get("figure"), (int, float)) and not r.get("error")]
    if not isinstance(t, (int, float)) or not peers or row_t.get("error"):
        return "—"
    lower = row_t.get("better") == "lower"
    best_fs, best = (min if lower else max)(peers, key=lambda p: p[1])
    if not t or not best:
        return "—"
    x = best / t if lower else t / best
    return "%s× (vs %s)" % (fmt(float(x)), LABEL.get(best_fs, best_fs))


def group(rows, workload):
    """{param: {fs: row}} in first-seen order."""
    out = {}
    for r in rows:
        if r["workload"] == workload:
            out.setdefault(r["param"], {})[r["fs"]] = r
    return out


def cell(r, key="figure"):
    if r is None:
        return "—"
    if r.get("error"):
        return "error"
    return fmt(r.get(key)) + ("†" if stolen(r) else "")


def stolen(r):
    """Whether the hypervisor stole at least STEAL_MARK percent of the CPU
    during row `r`'s timed region."""
    return (r.get("steal_pct") or 0) >= STEAL_MARK


KERNEL_PEERS = ["ext4", "ext4-fc", "xfs", "btrfs"]


def _row(rows, fs, wl, pred):
    return next((r for r in rows if r["fs"] == fs and r["workload"] == wl and pred(r)
                 and not r.get("error")), None)


def _best(rows, wl, pred, key, lower, peers):
    got = [(fs, r[key]) for fs in peers
           for r in [_row(rows, fs, wl, pred)] if r and isinstance(r.get(key), (int, float))]
    if not got:
        return None, None
    return (min if lower else max)(got, key=lambda x: x[1])


def fsync_targets(rows):
    """The fast-fsync targets, each checked against this run's figures."""
    out = ["| target | tux3 | best peer | ratio | met |", "|---|---|---|---|---|"]

    def line(name, tux, peer, ratio_text, met):
        out.append("| %s | %s | %s | %s | %s |" % (name, tux, peer, ratio_text,
                                                   "yes" if met else ("no" if met is not None else "—")))
    # 1. isolated append+fsync: <= 2 blocks, <= 1 flush per fsync, <= half the best kernel peer's time.
    one = lambda r: r.get("tasks") == 1
    t = _row(rows, "tux3", "syncs", one)
    t = t if t and t.get("ops_per_s") else None
    bfs, bv = _best(rows, "syncs", one, "ops_per_s", False, KERNEL_PEERS)
    if t and bv:
        x = t["ops_per_s"] / bv
        ok = (t.get("blocks_per_fsync") or 99) <= 2 and (t.get("flushes_per_fsync") or 99) <= 1 and x >= 2
        line("1x%s append+fsync: ≤ 2 blocks, ≤ 1 flush per fsync, ≥ 2× best kernel peer" % t.get("steps"),
             "%s fsyncs/s, %.2f blocks, %.3f flushes" % (fmt(t["ops_per_s"]), t.get("blocks_per_fsync") or 0,
                                                        t.get("flushes_per_fsync") or 0),
             "%s %s" % (LABEL[bfs], fmt(bv)), "%s×" % fmt(x), ok)
    # 2. the most tasks: >= 9x the best peer, far fewer flushes than fsyncs, sub-linear scaling.
    many = [r for r in rows if r["fs"] == "tux3" and r["workload"] == "syncs" and r.get("steps") == 10
            and not r.get("error") and r.get("ops_per_s")]
    if many:
        big = max(many, key=lambda r: r.get("tasks", 0))
        small = min(many, key=lambda r: r.get("tasks", 0))
        pred = lambda r, n=big["tasks"]: r.get("tasks") == n and r.get("steps") == 10
        bfs, bv = _best(rows, "syncs", pred, "ops_per_s", False, PEERS)
        if bv:
            x = big["ops_per_s"] / bv
            line("%dx10 fsyncs: ≥ 9× best peer, flushes ≪ fsyncs" % big["tasks"],
                 "%s fsyncs/s, %.3f flushes per fsync" % (fmt(big["ops_per_s"]), big.get("flushes_per_fsync") or 0),
                 "%s %s" % (LABEL[bfs], fmt(bv)), "%s×" % fmt(x),
                 x >= 9 and (big.get("flushes_per_fsync") or 1) < 0.1)
        if big is not small and small.get("seconds") and big.get("seconds"):
            grow = big["seconds"] / small["seconds"]
            tasks = big["tasks"] / small["tasks"]
            line("scaling %d → %d tasks sub-linear (time grows less than the task count)" % (
                small["tasks"], big["tasks"]), "time ×%s for tasks ×%s" % (fmt(grow), fmt(tasks)), "—", "—",
                grow < tasks)
    # 3. rename cycle with fsync: at most half the best peer's time.
    fs_ = lambda r: "no fsync" not in r.get("param", "")
    t = _row(rows, "tux3", "rename", fs_)
    bfs, bv = _best(rows, "rename", fs_, "figure", False, PEERS)
    if t and bv:
        x = t["figure"] / bv
        line("rename cycle with fsync: ≥ 2× best peer", "%s cycles/s, %.2f blocks, %.2f flushes per fsync" % (
            fmt(t["figure"]), t.get("blocks_per_fsync") or 0, t.get("flushes_per_fsync") or 0),
            "%s %s" % (LABEL[bfs], fmt(bv)), "%s×" % fmt(x), x >= 2)
    # 4. fsync p99 under a writer at most 3x idle.
    idle = _row(rows, "tux3", "fsync-load", lambda r: not r.get("loaded"))
    load = _row(rows, "tux3", "fsync-load", lambda r: r.get("loaded"))
    if idle and load and idle.get("lat_p99_ms") and load.get("lat_p99_ms"):
        x = load["lat_p99_ms"] / idle["lat_p99_ms"]
        bfs, bv = _best(rows, "fsync-load", lambda r: r.get("loaded"), "lat_p99_ms", True, PEERS)
        line("fsync p99 with a writer ≤ 3× idle p99", "%s ms vs %s ms idle" % (
            fmt(load["lat_p99_ms"]), fmt(idle["lat_p99_ms"])),
            "%s %s ms" % (LABEL[bfs], fmt(bv)) if bv else "—", "%s× idle" % fmt(x), x <= 3)
    # 5. dbench -s with 8, 16, 32 clients: ahead of every peer.
    for n in (8, 16, 32):
        pred = lambda r, n=n: r.get("clients") == n and r.get("sync")
        t = _row(rows, "tux3", "dbench", pred)
        bfs, bv = _best(rows, "dbench", pred, "figure", False, PEERS)
        if t and bv:
            x = t["figure"] / bv
            line("dbench -s, %d clients: ahead of every peer" % n, "%s MB/s" % fmt(t["figure"]),
                 "%s %s" % (LABEL[bfs], fmt(bv)), "%s×" % fmt(x), x > 1)
    return out if len(out) > 2 else []


def workload_table(rows, wl, fss):
    g = group(rows, wl)
    if not g:
        return []
    unit = next(iter(next(iter(g.values())).values())).get("unit", "")
    head = "| %s | " % ("parameter (%s)" % unit) + " | ".join(LABEL[f] for f in fss)
    out = [head + " | tux3 vs best peer |", "|---" * (len(fss) + 2) + "|"]
    for param, by_fs in g.items():
        if wl == "stream" and param.startswith("rand"):
            unit_note = " (IOPS)"
        else:
            unit_note = ""
        out.append("| %s%s | " % (param, unit_note) + " | ".join(
            cell(by_fs.get(f)) + ("*" if (by_fs.get(f) or {}).get("capped") else "") for f in fss)
                   + " | %s |" % ratio(by_fs, by_fs.get("tux3")))
    if wl == "syncs":
        out += ["", "| %s (seconds) | " % "parameter" + " | ".join(LABEL[f] for f in fss) + " |",
                "|---" * (len(fss) + 1) + "|"]
        for param, by_fs in g.items():
            out.append("| %s | " % param + " | ".join(
                cell(by_fs.get(f), "seconds") + ("*" if (by_fs.get(f) or {}).get("capped") else "")
                for f in fss) + " |")
    return out


def per_fsync_table(rows, wl, fss):
    g = group(rows, wl)
    fss = [f for f in fss if f != "tmpfs"]
    out = []
    for param, by_fs in g.items():
        if not any(by_fs.get(f, {}).get("blocks_per_fsync") is not None for f in fss):
            continue
        if not out:
            out = ["| %s: 4 KiB blocks / flushes per fsync | " % wl +
                   " | ".join(LABEL[f] for f in fss) + " |", "|---" * (len(fss) + 1) + "|"]
        cells = []
        for f in fss:
            r = by_fs.get(f)
            if not r or r.get("blocks_per_fsync") is None:
                cells.append("—")
            else:
                cells.append("%.2f / %s" % (r["blocks_per_fsync"], fmt(r.get("flushes_per_fsync"))))
        out.append("| %s | " % param + " | ".join(cells) + " |")
    return out


def latency_table(rows, fss):
    g = group(rows, "fsync-load")
    if not g:
        return []
    out = ["| filesystem | " + " | ".join("%s p50 / p99 / max (ms)" % p for p in g) +
           " | writer MB/s |", "|---" * (len(g) + 2) + "|"]
    for f in fss:
        cells, wmb = [], "—"
        for p, by_fs in g.items():
            r = by_fs.get(f)
            if not r or r.get("error"):
                cells.append("—" if not r else "error")
                continue
            cells.append("%s / %s / %s" % (fmt(r.get("lat_p50_ms")), fmt(r.get("lat_p99_ms")),
                                           fmt(r.get("lat_max_ms"))))
            if r.get("writer_mb_s"):
                wmb = fmt(r["writer_mb_s"])
        out.append("| %s | " % LABEL[f] + " | ".join(cells) + " | %s |" % wmb)
    return out


DAEMONS = ("tux3", "tux3-devfuse", "fuse2fs")


def cpu_table(rows):
    daemons = [f for f in DAEMONS if any(r["fs"] == f and r.get("fs_cpu_s") is not None for r in rows)]
    if not daemons:
        return []
    keys = []
    for r in rows:
        k = (r["workload"], r["param"])
        if r["fs"] in daemons and k not in keys:
            keys.append(k)
    out = ["| workload | " + " | ".join("%s CPU s (per op µs)" % LABEL[d] for d in daemons) + " |",
           "|---" * (len(daemons) + 1) + "|"]
    for wl, p in keys:
        cells = []
        for d in daemons:
            r = next((x for x in rows if x["fs"] == d and x["workload"] == wl and x["param"] == p), None)
            if not r or r.get("fs_cpu_s") is None:
                cells.append("—")
            else:
                per = r["fs_cpu_s"] / r["ops"] * 1e6 if r.get("ops") else None
                cells.append("%s (%s)" % (fmt(r["fs_cpu_s"]), fmt(per)))
        out.append("| %s %s | " % (wl, p) + " | ".join(cells) + " |")
    return out


def per_op(count, ops):
    """A count per operation, two significant digits below 0.1."""
    v = float(count) / ops
    return "%.2g" % v if v < 0.1 else fmt(v)


def top_requests(by_op, ops, most=8, share=0.01):
    """Per operation, the opcodes that make at least `share` of the requests
    (`most` of them at most), most frequent first, then the rest as `other`."""
    total = sum(by_op.values())
    items = sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [(name, c) for name, c in items[:most] if c >= share * total]
    parts = ["%s %s" % (name, per_op(c, ops)) for name, c in shown]
    rest = total - sum(c for _, c in shown)
    if rest:
        parts.append("other %s" % per_op(rest, ops))
    return ", ".join(parts) or "none"


def requests_table(rows):
    """Per step of each daemon: CPU and FUSE requests per operation (the
    operation of the CPU table: the step's `ops`)."""
    counted = [r for r in rows if r["fs"] in DAEMONS and r.get("fuse_requests") is not None]
    if not counted:
        return []
    daemons = [d for d in DAEMONS if any(r["fs"] == d for r in counted)]
    keys = []
    for r in counted:
        if (r["workload"], r["param"]) not in keys:
            keys.append((r["workload"], r["param"]))
    out = ["| workload | filesystem | CPU µs per op | requests per op | CPU µs per request | "
           "requests per op by opcode |", "|---|---|---|---|---|---|"]
    for wl, p in keys:
        first = True
        for d in daemons:
            r = next((x for x in counted if x["fs"] == d and x["workload"] == wl
                      and x["param"] == p), None)
            if not r:
                continue
            ops, n, cpu = r.get("ops"), r["fuse_requests"], r.get("fs_cpu_s")
            low = "≥" if r.get("fuse_requests_lost") else ""
            cells = ["%s %s" % (wl, p) if first else "", LABEL[d],
                     fmt(cpu / ops * 1e6) if ops and cpu is not None else "—",
                     low + fmt(float(n) / ops) if ops else "— (%d in all)" % n,
                     fmt(cpu / n * 1e6) if n and cpu is not None else "—",
                     top_requests(r.get("fuse_requests_by_op") or {}, ops) if ops else "—"]
            out.append("| " + " | ".join(cells) + " |")
            first = False
    return out


def requests_text(res):
    """How the FUSE requests were counted, or why they were not; None when
    the run had no FUSE daemon."""
    rows = res["rows"]
    if not any(r["fs"] in DAEMONS for r in rows):
        return None
    t = res.get("fuse_trace")
    if t is None:
        return ("FUSE requests were not counted: these results predate the counting "
                "(`bench/run` now counts them with the tracepoint `fuse:fuse_request_send`).")
    if not t.get("counted"):
        return "FUSE requests were not counted in this run: %s." % t.get("why", "?")
    lost = t.get("lost") or 0
    return ("FUSE requests are counted with the kernel tracepoint `fuse:fuse_request_send` "
            "(one event per request the kernel sends to the daemon) in a tracing instance of "
            "the run's own (%s KiB of ring buffer per CPU), filtered in the kernel to the "
            "connection (device number) of the mount under test and recording only during "
            "each step's timed region, the window of the daemon CPU time; the events are "
            "counted by opcode from the instance's `trace` afterwards. The tracepoint's cost is "
            "inside the timed figures (`bench/run --no-fuse-trace` leaves it out). Events lost "
            "to a full buffer: %s." % ("{:,}".format(t.get("buffer_kb") or 0),
                             "none" if not lost else "{:,} (those counts are lower bounds, "
                             "marked ≥)".format(lost)))


def speed(e, t):
    """Engine over tmpfs as speeds (>1: the engine is faster)."""
    if e and t and e.get("figure") and t.get("figure") and not e.get("error") and not t.get("error"):
        return "%s×" % fmt(float((t["figure"] / e["figure"]) if e.get("better") == "lower"
                                 else (e["figure"] / t["figure"])))
    return "—"


NO_FLUSH_TEXT = (
    "The Tux3 reports' variant: the same loadfile without its Flush lines, as those reports "
    "ran dbench (with client2.txt, which has none; their durability came from a `sync` every "
    "4 s instead, which is not made here). Nothing in these runs asks for durability: the "
    "engine, opened without a commit thread, commits only under dirty-memory pressure, and "
    "tmpfs never writes. Against the rows without `-s` above, the difference is what the "
    "Flushes (fsyncs) cost.")


def engine_table(rows):
    out = []
    tables = (("engine-syncs", "syncs", "seconds, lower is better", lambda r: True, None),
              ("engine-dbench", "dbench", "MB/s, higher is better",
               lambda r: not r.get("skip_flush"), None),
              ("engine-dbench", "dbench, no Flush", "MB/s, higher is better",
               lambda r: r.get("skip_flush"), NO_FLUSH_TEXT))
    for wl, title, what, pick, text in tables:
        g = group([r for r in rows if pick(r)], wl)
        if not g:
            continue
        out += ["", "**%s** (%s)" % (title, what), ""] + ([text, ""] if text else []) + [
                "| parameter | tux3 engine | tmpfs (system calls) | engine ÷ tmpfs speed | "
                "engine blocks / flushes per fsync | deltas |",
                "|---|---|---|---|---|---|"]
        for p, by in g.items():
            e, t = by.get("tux3-engine"), by.get("tmpfs-syscalls")
            pf = "—"
            if e and e.get("blocks_per_fsync") is not None:
                pf = "%.2f / %.2f" % (e["blocks_per_fsync"], e["flushes_per_fsync"])
            out.append("| %s | %s | %s | %s | %s | %s |" % (p, cell(e), cell(t), speed(e, t), pf,
                                                          fmt(e.get("deltas")) if e else "—"))
    g = group(rows, "engine-meta")
    if g:
        out += ["", "**meta** (operations per second, higher is better)", "",
                "`flat`: create, stat and unlink N empty files in one directory; `tree`: N empty "
                "files in a two-level tree (100 per leaf directory, 10 leaves per top directory), "
                "create (with the directories), stat, delete (files, then directories). One "
                "thread, as the mount's meta load; each phase timed on its own, with warm caches "
                "(nothing is dropped between phases). The engine is called with the parent "
                "directory's inode, tmpfs through `openat`/`fstatat`/`unlinkat` on a directory "
                "descriptor. An untimed `Fs::sync` follows every engine phase: the blocks column "
                "gives the 4 KiB blocks written in the timed phase / including that sync.", "",
                "| parameter | tux3 engine | tmpfs (system calls) | engine ÷ tmpfs speed | "
                "engine blocks: phase / with sync | deltas |",
                "|---|---|---|---|---|---|"]
        for p, by in g.items():
            e, t = by.get("tux3-engine"), by.get("tmpfs-syscalls")
            blocks = "—"
            if e and e.get("dev_blocks") is not None:
                blocks = "%s / %s" % (fmt(e["dev_blocks"]), fmt(e.get("dev_blocks_all")))
            out.append("| %s | %s | %s | %s | %s | %s |" % (p, cell(e), cell(t), speed(e, t), blocks,
                                                          fmt(e.get("deltas")) if e else "—"))
    return out


def commands(res):
    q = res.get("params", {})
    e = " ".join(EXT4_OPTS)
    return [
        "```",
        "# the run",
        " ".join(res.get("argv", ["bench/run"])),
        "# one backing image, written in full once (no block left sparse), then for",
        "# every filesystem a loop device with direct I/O over it; no discards",
        "dd if=/dev/zero of=IMG bs=64M count=SIZE/64M oflag=direct",
        "losetup --direct-io=on -f --show IMG",
        "mkfs.ext4 -F -q %s LOOP                    # ext4, and fuse2fs" % e,
        "mkfs.ext4 -F -q -O fast_commit %s LOOP     # ext4 fast_commit" % e,
        "mkfs.xfs -f -q -K LOOP; mkfs.btrfs -f -q -K LOOP; target/release/tux3 mkfs LOOP",
        "mount -t ext4|xfs LOOP MNT; mount -t btrfs -o nodiscard LOOP MNT",
        "fuse2fs LOOP MNT; target/release/tux3 mount -o %s LOOP MNT" % (
            "uring" if res.get("machine", {}).get("tux3_transport") == "io_uring" else "nouring"),
        "# tux3 -o uring: echo Y > /sys/module/fuse/parameters/enable_uring for the run" + (
            "\n# tux3 /dev/fuse: target/release/tux3 mount -o nouring LOOP MNT (not a peer)"
            if any(r["fs"] == "tux3-devfuse" for r in res["rows"]) else "")
        if res.get("machine", {}).get("tux3_transport") == "io_uring" else
        "# tux3 through /dev/fuse (this kernel has no FUSE over io_uring)",
        "mount -t tmpfs -o size=SIZE tux3-bench-tmpfs MNT",
        "# workloads (bench/c/*.c compiled with gcc -O2)",
        "syncs DIR TASKS STEPS %s              # %s" % (q.get("syncs_cap") or "", ", ".join(
            "%dx%d" % tuple(x) for x in q.get("syncs", []))),
        "rename_cycle DIR %s 16000 1|0 %s" % (q.get("rename_cycles", "N"), q.get("cap") or ""),
        "dbench -D DIR -t %s -c %s [-s] CLIENTS   # clients %s" % (
            q.get("dbench_secs"), q.get("loadfile"), q.get("dbench_clients")),
        "fsync_latency writer FILE %s %s & fsync_latency probe FILE %s %s" % (
            q.get("writer_bound"), (q.get("lat_secs") or 0) + 2, q.get("lat_secs"), q.get("lat_every_ms", 100)),
        "meta flat DIR %s create|stat|unlink %s; meta tree DIR %s create|read|delete %s; find DIR" % (
            q.get("meta_flat"), q.get("cap") or "", q.get("meta_tree"), q.get("cap") or ""),
        "fio --name=seqwrite|seqread --rw=write|read --bs=1M --size=%s --end_fsync=1 --ioengine=psync" % q.get("stream_size"),
        "fio --name=randrw --rw=randrw --bs=4k --size=%s --time_based --runtime=%s --end_fsync=1" % (
            q.get("rand_size"), q.get("rand_secs")),
        "echo 3 > /proc/sys/vm/drop_caches     # after sync -f, before every cold read",
        "sync -f MNT                           # after every step (its I/O is counted separately)",
    ] + ([
        "tux3 sync MNT                         # on tux3, after every sync -f (syncfs does not reach a FUSE server)",
    ] if q.get("commit_tux3") else []) + ([
        "# FUSE requests of each step (T: the run's tracing instance, DEV: the mount's st_dev)",
        "echo 1 > T/events/fuse/fuse_request_send/enable; echo 'connection == DEV' > T/events/fuse/fuse_request_send/filter",
        "echo > T/trace; echo 1 > T/tracing_on; STEP; echo 0 > T/tracing_on   # then count T/trace by opcode",
    ] if (res.get("fuse_trace") or {}).get("counted") else []) + [
        "# bench/engine, on LOOP formatted fresh for each run, or on a directory of a tmpfs",
        "tux3-bench-engine syncs --tasks T --steps N --engine LOOP | --posix TMPFS_DIR",
        "tux3-bench-engine dbench --clients N --seconds %s --loadfile %s [--sync | --skip-flush] ..." % (
            q.get("engine_dbench_secs"), q.get("loadfile")),
        "tux3-bench-engine meta --flat %s --tree 0 ...; tux3-bench-engine meta --flat 0 --tree %s ..." % (
            q.get("meta_flat"), q.get("meta_tree")),
        "```",
        "",
        "Regenerate this page from saved results: "
        "`bench/run --report-only bench/results/results.json`.",
        "",
    ]


SNAP_STEPS = [
    # step, what the figure is, label of the btrfs command when it differs
    ("create-empty", "latency"), ("create-files", "latency"), ("fill", "total"),
    ("create-many", "latency"), ("list", "latency"), ("mount-empty", "latency"),
    ("mount", "latency"), ("delete", "latency"), ("delete-space", "latency"),
    ("delete-many", "latency"), ("delete-many-space", "single"),
    ("reclaim-delete", "single"), ("reclaim-space", "single"), ("fsync-idle", "fsync"),
    ("fsync-reclaim", "fsync"),
]

SNAP_TEXT = (
    "Read-only snapshots of tux3 (the whole volume, through its mount: `tux3 snapshot` on "
    "a path of the mount, which the mount's server carries out) against Btrfs snapshots of "
    "a subvolume (`vol`, made on the fresh Btrfs; snapshots into `snaps/`), each on a "
    "fresh filesystem on its own loop device as above. Every create, list and delete is "
    "one whole command, timed from its start to its exit (a process start included, for "
    "both). In order: creates on the empty volume; D bytes in 64 KiB files, a snapshot, "
    "every file overwritten (the snapshot then alone holds D), the fsync probe idle for a "
    "while, then the probe again while that snapshot is deleted and its space reclaimed; "
    "F small files (the meta tree load) and creates; deletes of those snapshots, one at a "
    "time, each followed by waiting for its space: tux3 polls `tux3 snapshot list MNT "
    "--json` (every 20 ms, one listing at a time) until the row is gone, Btrfs runs "
    "`btrfs subvolume sync MNT`; creates until S snapshots exist (timed as a whole); "
    "creates with S present; listing; unmount, drop caches and mount; deletes with S "
    "present, back to back, then one wait for all of them (from the first delete's start; "
    "with S snapshots a single tux3 listing, so a single poll, takes as long as the list "
    "row shows). The Btrfs delete "
    "is `-c` (it commits before returning), as a tux3 delete is durable when it returns. "
    "A snapshot of tux3 is taken by one commit, a Btrfs snapshot by one transaction "
    "commit. tux3 mounts commit every 5 s (the default `commit=5`); a tux3 delete "
    "reclaims at most 1,024 extents a commit, a commit every 10 ms while any is left. Times in ms, lower is better; **tux3 vs "
    "Btrfs** is Btrfs's time over tux3's (the median, the p99 for the fsync rows, or the "
    "one figure): above 1 tux3 is faster.")


def _ms(v):
    return "—" if v is None else "%s ms" % fmt(float(v))


def _snap_cell(r, kind):
    if r is None:
        return "—"
    if r.get("error") and r.get("figure") is None:
        return "error"
    if kind == "latency":
        return "%s / %s" % (fmt(r.get("lat_p50_ms")), fmt(r.get("lat_p99_ms")))
    if kind == "total":
        per = r["seconds"] / r["ops"] * 1e3 if r.get("ops") else None
        return "%s s (%s ms each)%s" % (fmt(r.get("seconds")), fmt(per),
                                        "*" if r.get("error") else "")
    if kind == "fsync":
        n = r.get("ops") or 0
        return "%s / %s (%s sample%s)" % (fmt(r.get("lat_p50_ms")), fmt(r.get("lat_p99_ms")),
                                         "{:,}".format(n), "" if n == 1 else "s")
    return fmt(r.get("figure"))


def _snap_ratio(t, b, kind):
    key = "seconds" if kind == "total" else ("lat_p99_ms" if kind == "fsync" else "figure")
    if not t or not b or t.get(key) is None or b.get(key) is None or not t[key]:
        return "—"
    return "%s×" % fmt(float(b[key]) / float(t[key]))


def snapshot_section(snap, engine_text):
    """The Snapshots section: tux3 through its mount against Btrfs, then the
    engine alone (from bench/snapshots-engine.md)."""
    L = ["## Snapshots", ""]
    rows = (snap or {}).get("rows") or []
    if not rows:
        L += ["Not run yet through the mounts (`bench/run --fs tux3,btrfs --workloads "
              "snapshots`).", ""]
    else:
        q = snap.get("params") or {}
        m = snap.get("machine") or {}
        L += ["%s (%s%s, %s)." % (
            SNAP_TEXT, "`%s`" % " ".join(snap.get("argv") or ["bench/run"]),
            ", --quick: small counts, noisy" if snap.get("quick") else "", m.get("date", "?")),
            "",
            "D = %s MiB, F = %s, S = %s; timed per step: creates %s, listings %s, mounts %s, "
            "deletes %s; the probe appends 4 KiB and fsyncs every %s ms (%s s idle)." % (
                "{:,}".format((q.get("snap_reclaim_bytes") or 0) >> 20),
                "{:,}".format(q.get("snap_files") or 0), "{:,}".format(q.get("snap_many") or 0),
                q.get("snap_creates"), q.get("snap_lists"), q.get("snap_mounts"),
                q.get("snap_deletes"), q.get("snap_probe_ms"), q.get("snap_idle_secs")), ""]
        by = {}
        for r in rows:
            by.setdefault(r.get("step"), {})[r["fs"]] = r
        L += ["| step | tux3 command | Btrfs command | tux3 median / p99 | Btrfs median / p99 | "
              "tux3 vs Btrfs |", "|---|---|---|---|---|---|"]
        for step, kind in SNAP_STEPS:
            g = by.get(step)
            if not g:
                continue
            t, b = g.get("tux3"), g.get("btrfs")
            param = (t or b)["param"]
            n = (t or b).get("ops")
            if kind == "latency" and n:
                param += " (%s×)" % "{:,}".format(n)
            if kind == "single":
                param += " (one)"
            if kind == "fsync":
                param = param.replace("fsync p99", "fsync p50 / p99")

            # the steps without a command of their own: the one they run
            same = {"reclaim-space": "delete-space", "fsync-reclaim": "fsync-idle"}.get(step)

            def cmd(r):
                if r and step == "fsync-reclaim":
                    return "`fsync_latency probe FILE SECS %s t`, ended by SIGTERM once the " \
                        "space is back" % q.get("snap_probe_ms")
                if r and not r.get("cmd") and same:
                    r = by.get(same, {}).get(r["fs"])
                return "`%s`" % r["cmd"].replace("|", "\\|") if r and r.get("cmd") else "—"
            L.append("| %s | %s | %s | %s | %s | %s |" % (
                param, cmd(t), cmd(b), _snap_cell(t, kind), _snap_cell(b, kind),
                _snap_ratio(t, b, kind)))
        ti, tr = by.get("fsync-idle", {}), by.get("fsync-reclaim", {})
        if tr:
            L += ["", "fsync p99 during the reclaim over the idle p99 (at most 1 would mean the "
                  "reclaim costs the other process nothing): %s." % "; ".join(
                      "%s %s×" % (LABEL[f], fmt(float(tr[f]["vs_idle"])))
                      for f in ("tux3", "btrfs") if tr.get(f, {}).get("vs_idle") is not None)]
            left = tr.get("tux3") and by.get("reclaim-space", {}).get("tux3", {}).get(
                "reclaim_left")
            if left:
                L[-1] += (" tux3 listed %s extents left to reclaim at its first poll after "
                          "the delete." % "{:,}".format(left))
        if by.get("fill", {}) and any(r.get("error") for r in by["fill"].values()):
            L += ["", "\\* the fill stopped at the workload's time budget (see the notes)."]
        errs = ["- %s / %s: %s" % (r["fs"], r["param"], r["error"]) for r in rows
                if r.get("error")]
        errs += ["- %s skipped: %s" % (LABEL.get(f, f), w)
                 for f, w in (snap.get("skipped") or {}).items()]
        errs += ["- %s" % n for n in snap.get("notes") or []]
        if errs:
            L += ["", "Errors and notes of this run:", ""] + errs
        L += ["", "Raw results: `bench/results/snapshots.csv` and `snapshots.json`; "
              "regenerate with `bench/run --report-only bench/results/snapshots.json`.", ""]
    if engine_text:
        L += ["### The engine alone", "", engine_text.strip(), ""]
    return L


def engine_snapshot_text():
    """bench/snapshots-engine.md without its leading comment."""
    return hand_measured("snapshots-engine.md")


def hand_measured(name):
    """bench/NAME (figures measured by hand, outside a run) without its
    leading comment; empty if it is missing."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), name)
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    if text.startswith("<!--"):
        text = text[text.index("-->") + 3:]
    return text


SPACE_PARTS = [("aging.md", "Aging by git checkouts"),
               ("fill.md", "A full, fragmented volume; allocation at fill levels"),
               ("bigvol.md", "A 16 TiB volume: memory and mount time")]


def space_section():
    """Free space and aging: bench/space.md (how to read it), then what
    bench/aging.sh, fill.sh and bigvol.sh wrote (make bench-aging)."""
    parts = [(title, hand_measured(name)) for name, title in SPACE_PARTS]
    if not any(text for _, text in parts):
        return []
    L = ["## Free space and aging", ""]
    intro = hand_measured("space.md")
    if intro:
        L += [intro.strip(), ""]
    for title, text in parts:
        L += ["### " + title, "", text.strip() if text else
              "Not measured yet (`make bench-aging`).", ""]
    return L


def write(res, path, plotdir, plots):
    rows = res["rows"]
    fss = [f for f in FILESYSTEMS if any(r["fs"] == f for r in rows)]
    m = res.get("machine", {})
    cap = res.get("params", {}).get("cap")
    quick = ("--quick (a smoke test: small counts, 1-2 s timed runs; the numbers are noisy "
             "and only indicative)")
    capnote = (" Rename and metadata steps marked ≤N stop after %s s; their rates are over "
               "the operations done." % cap) if cap else ""
    L = ["# Benchmarks", "",
         "Generated by `bench/run`%s on %s. Every filesystem runs on a loop device "
         "(direct I/O) over the same fully written image (no sparse blocks, no discards: "
         "see `bench/py/fsetup.py`), formatted fresh for each "
         "workload (in quick mode once), so the block-layer counters are comparable. **tux3 vs best peer** is "
         "tux3's speed over the best of %s (tmpfs is shown but is no peer): above 1 tux3 is "
         "faster.%s" % (" " + quick if res.get("quick") else "", m.get("date", "?"),
                      ", ".join(LABEL[p] for p in PEERS), capnote), ""]
    L += ["## Machine", "",
          "| | |", "|---|---|",
          "| CPU | %s, %s cores |" % (m.get("cpu", "?"), m.get("cores", "?")),
          "| RAM | %s GiB |" % m.get("ram_gib", "?"),
          "| kernel | %s |" % m.get("kernel", "?"),
          "| storage under the scratch dir | %s |" % m.get("storage", "?"),
          "| tux3's FUSE transport | %s |" % m.get("tux3_transport", "/dev/fuse"),
          "| CPU idle | %s |" % m.get("cpu_idle", "not recorded by this run"),
          "| date | %s |" % m.get("date", "?")]
    for k, v in m.get("versions", {}).items():
        L.append("| %s | %s |" % (k, v))
    t = res.get("timing", {})
    if t.get("total_s"):
        L.append("| run time | %s s%s |" % (t["total_s"], ", of which %s s building bench/engine"
                                            % t["engine_build_s"] if t.get("engine_build_s") else ""))
    L += ["", "## How it was run", ""] + commands(res)
    L += ["Counters come from `/sys/block/loopN/stat` (Documentation/block/stat.rst): write "
          "I/Os (field 5), sectors written (field 7, shown as 4 KiB blocks), flushes (field "
          "16). Per-fsync figures count the timed region only; the other counts include the "
          "`sync -f` after it. Filesystem daemon CPU is utime+stime from /proc/PID/stat.",
          "",
          "This is a virtual machine: a figure marked † comes from a step during which the "
          "hypervisor kept at least %g%% of the CPU time from it (steal time, the `cpu` line of "
          "/proc/stat, over the timed region), and may be low for that reason alone. Before "
          "each filesystem is set up the run waits (up to %g s) for a second with at "
          "most %g%% stolen." % (STEAL_MARK, CALM_TIMEOUT, CALM_PCT), ""]
    rt = requests_text(res)
    if rt:
        L += [rt, ""]
    for wl in ("syncs", "rename", "dbench", "fsync-load", "meta", "stream"):
        t = workload_table(rows, wl, fss)
        if not t:
            continue
        title, text = WORKLOAD_TEXT[wl]
        L += ["## %s" % title, "", text, ""] + t + [""]
        if wl in ("syncs", "rename"):
            pf = per_fsync_table(rows, wl, fss)
            if pf:
                L += pf + [""]
        if wl == "fsync-load":
            L += latency_table(rows, fss) + [""]
        if wl == "meta":
            bound = hand_measured("inode-bound.md")
            if bound:
                L += ["### Past the bound on cached inodes", "", bound.strip(), ""]
            atime = hand_measured("atime.md")
            if atime:
                L += ["### What access times cost the tree read", "", atime.strip(), ""]
        for name in plots:
            if name.startswith(wl.replace("-", "_")):
                L += ["![%s](%s)" % (name, os.path.relpath(os.path.join(plotdir, name),
                                                            os.path.dirname(path))), ""]
    for name in plots:
        if name.startswith("per_fsync"):
            L += ["![blocks and flushes per fsync](%s)" % os.path.relpath(
                os.path.join(plotdir, name), os.path.dirname(path)), ""]
    # Sections measured by their own scripts, outside a run.
    for name, title in [("datasums.md", "Data checksums"), ("scrub.md", "Scrub"), ("defrag.md", "Defrag"),
                        ("clone.md", "Clones (cp through the mount)"),
                        ("clone-delete.md", "Deleting a million clones"), ("dedupe.md", "Dedupe"),
                        ("shrink.md", "Online shrink")]:
        text = hand_measured(name)
        if text:
            L += ["## " + title, "", text.strip(), ""]
    L += space_section()
    ft = fsync_targets(rows)
    if ft:
        L += ["## Fast fsync targets", "",
              "The targets of the fast-fsync design, checked against this run (speeds: higher "
              "is better; the ratio is tux3 over the best peer).", ""] + ft + [""]
    c = cpu_table(rows)
    if c:
        L += ["## CPU time of the filesystem daemon", "",
              "Kernel filesystems have no process of their own to measure.", ""] + c + [""]
        wake = hand_measured("wakeups.md")
        if wake:
            L += ["### Where a request's time goes on this machine", "", wake.strip(), ""]
        copy = hand_measured("read-copy.md")
        if copy:
            L += ["### What a cold read costs the daemon", "", copy.strip(), ""]
    rq = requests_table(rows)
    if rq:
        L += ["## FUSE requests per operation", "",
              "The requests the kernel sent to the filesystem daemon in each step's timed "
              "region, per operation of the step: the same operation as in the CPU table above "
              "(an fsync, a rename cycle, one of dbench's operations, a probe of fsync-load "
              "with the writer's requests and CPU counted too, a file of meta, an I/O of fio), with the daemon's CPU time beside them. Opcodes "
              "most frequent first; `other` is the rest. How they are counted: see How it was "
              "run.", ""] + rq + [""]
        origins = hand_measured("requests.md")
        if origins:
            L += [origins.strip(), ""]
    elif rt and c:
        L += ["## FUSE requests per operation", "", rt, ""]
    L += ["## Engine without FUSE vs tmpfs", "",
          "`bench/engine` links the tux3 library and replays the syncs load (threads instead "
          "of processes), dbench's loadfile (same operations, one thread per client) and the "
          "metadata load through the engine API on a loop device, formatted fresh for each "
          "run; the same loads run through system calls on tmpfs. The engine's own device "
          "counters give blocks (4 KiB) and flushes per fsync."]
    e = engine_table(rows)
    L += e if e else ["", "Not run."]
    floor = hand_measured("fsync-floor.md")
    if e and floor:
        L += ["", "### What an fsync costs the engine on this device", "", floor.strip()]
    L += [""] + snapshot_section(res.get("snapshots"), engine_snapshot_text())
    sendrecv = hand_measured("sendrecv.md")
    L += ["## Send and receive", "",
          (sendrecv.strip() if sendrecv else
           "Not measured yet: `bench/sendrecv.py` (run by `make bench`) writes "
           "`bench/sendrecv.md`, which this section copies."), ""]
    clones = hand_measured("send-clones.md")
    if clones:
        L += ["### Clones", "", clones.strip(), ""]
    L += ["## Not run, errors and notes", ""]
    notes = ["- **%s** skipped: %s" % (LABEL.get(f, f), why) for f, why in res.get("skipped", {}).items()]
    notes += ["- %s / %s / %s: %s" % (r["fs"], r["workload"], r["param"], r["error"])
              for r in rows if r.get("error")]
    notes += ["- %s / %s / %s: %.1f%% of the CPU stolen by the hypervisor (†)" % (
        r["fs"], r["workload"], r["param"], r["steal_pct"]) for r in rows if stolen(r)]
    notes += ["- %s" % n for n in res.get("notes", [])]
    L += notes or ["None."]
    L += ["", "Raw results: `bench/results/results.csv` and `results.json` (one row per "
          "filesystem × workload × parameter); the full command log is `bench/results/run.log`.", ""]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(L))
