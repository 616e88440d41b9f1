"""The engine-level run: bench/engine (a separate Cargo package that links
the tux3 library) replays the syncs load, the dbench loadfile (as it is,
and without its Flush lines as the Tux3 reports ran it) and the metadata
load straight through the engine API on a loop device (no FUSE), and the
same loads through system calls on tmpfs. Also builds target/release/tux3
when it is missing.
"""

import json
import os
import shutil
import time

import util
from util import CmdError, last_json, say


def cargo_env():
    env = dict(os.environ)
    env["PATH"] = os.path.expanduser("~/.cargo/bin") + os.pathsep + env.get("PATH", "")
    return env


def ensure_tux3(root, tux3, results):
    if os.access(tux3, os.X_OK):
        return
    say("building tux3 (cargo build --release)")
    try:
        util.run(["cargo", "build", "--release"], cwd=root, timeout=1800, env=cargo_env())
    except CmdError as e:
        results["notes"].append("cargo build --release failed: %s" % str(e)[:300])


def build(root):
    """Build bench/engine; by default into the project's own target dir so
    the tux3 library and its dependencies are compiled once."""
    target = os.environ.get("BENCH_ENGINE_TARGET_DIR", os.path.join(root, "target"))
    # The project's lock file, so the engine gets the same dependency
    # versions (and reuses their build artifacts).
    lock = os.path.join(root, "Cargo.lock")
    if os.path.exists(lock):
        shutil.copyfile(lock, os.path.join(root, "bench", "engine", "Cargo.lock"))
    env = cargo_env()
    env["CARGO_TARGET_DIR"] = target
    util.run(["cargo", "build", "--release", "--manifest-path",
         os.path.join(root, "bench", "engine", "Cargo.toml")], timeout=1800, env=env)
    return os.path.join(target, "release", "tux3-bench-engine")


def all_json(text):
    """Every line of `text` that parses as a JSON object, in order."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    if not out:
        raise CmdError("no JSON result in output: %r" % text[-300:])
    return out


def clients(c):
    return "%d client%s" % (c, "" if c == 1 else "s")


def build_first(root, results):
    """Build bench/engine before the run's first workload, so that it is the
    code the run records (a change made to the tree while the filesystems'
    workloads run does not reach it); its path, or None (skipped)."""
    say("engine: building bench/engine")
    t0 = time.monotonic()
    try:
        binary = build(root)
        results.setdefault("timing", {})["engine_build_s"] = round(time.monotonic() - t0, 1)
        return binary
    except CmdError as e:
        results["skipped"]["engine"] = "bench/engine does not build: %s" % str(e)[-300:]
        say("engine: SKIPPED: build failed")
        return None


def run_all(ctx, env, results, show, binary):
    """The engine workload with `binary` (from `build_first`)."""
    if binary is None:
        return
    dev = env.attach(env.backing_image())
    m = None
    try:
        m = env.setup("tmpfs")
        runs = [("syncs", "%dx%d" % (t, s), ["--tasks", t, "--steps", s]) for t, s in ctx.syncs]
        for sync in (False, True):
            for c in ctx.dbench_clients:
                runs.append(("dbench", clients(c) + (", -s" if sync else ""),
                             ["--clients", c, "--seconds", ctx.engine_dbench_secs,
                              "--loadfile", ctx.loadfile] + (["--sync"] if sync else [])))
        # The Tux3 reports' variant: their loadfile (client2.txt) has no
        # Flush, so nothing is made durable by the clients themselves.
        for c in ctx.dbench_clients:
            runs.append(("dbench", clients(c) + ", no Flush",
                         ["--clients", c, "--seconds", ctx.engine_dbench_secs,
                          "--loadfile", ctx.loadfile, "--skip-flush"]))
        # One run per set, each on a freshly formatted volume; a run prints
        # one result per phase.
        runs.append(("meta", "flat", ["--flat", ctx.meta_flat, "--tree", 0]))
        runs.append(("meta", "tree", ["--flat", 0, "--tree", ctx.meta_tree]))
        n = 0
        for load, param, args in runs:
            for kind in ("engine", "posix"):
                n += 1
                if kind == "engine":
                    where = ["--engine", dev]
                else:
                    d = os.path.join(m.mnt, "run%d" % n)
                    os.mkdir(d)
                    where = ["--posix", d]
                base = {"fs": "tux3-engine" if kind == "engine" else "tmpfs-syscalls",
                        "workload": "engine-" + load, "param": param, "error": ""}
                timeout = ctx.step_timeout + (ctx.engine_dbench_secs if load == "dbench" else 0)
                t0 = util.cpu_ticks()
                try:
                    rc, out, err = util.run([binary, load] + where + args, timeout=timeout, check=False)
                    found = all_json(out) if load == "meta" else [last_json(out)]
                    if rc != 0:
                        for res in found:
                            res["error"] = "exit %d: %s" % (rc, err.strip()[-300:])
                except CmdError as e:
                    found = [{"error": str(e)[:300]}]
                # Over the whole command (a meta run's phases share it).
                steal = util.steal_pct(t0, util.cpu_ticks())
                for res in found:
                    row = dict(base)
                    if steal is not None:
                        row["steal_pct"] = round(steal, 2)
                    row.update(res)
                    if load == "syncs":
                        row.update(figure=row.get("seconds"), unit="s", better="lower")
                    elif load == "dbench":
                        row.update(figure=row.get("mb_s"), unit="MB/s", better="higher",
                                   skip_flush="--skip-flush" in args)
                    else:
                        count = ctx.meta_flat if param == "flat" else ctx.meta_tree
                        phase = res.get("phase")
                        row.update(param=" ".join([param] + ([phase] if phase else []) + [str(count)]),
                                   figure=row.get("ops_per_s"), unit="ops/s", better="higher")
                    if row.get("ops") and row.get("seconds"):
                        row["ops_per_s"] = row["ops"] / row["seconds"]
                    if kind == "engine" and row.get("fsyncs") and "dev_blocks" in row:
                        f = row["fsyncs"]
                        row.update(blocks_per_fsync=row["dev_blocks"] / f,
                                   writes_per_fsync=row["dev_writes"] / f,
                                   flushes_per_fsync=row["dev_flushes"] / f)
                    results["rows"].append(row)
                    show(row)
    finally:
        if m:
            env.teardown(m)
        env.detach(dev)
