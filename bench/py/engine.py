"""The engine-level run: bench/engine (a separate Cargo package that links
the tux3 library) replays the syncs load and the dbench loadfile straight
through the engine API on a loop device (no FUSE), and the same loads
through system calls on tmpfs. Also builds target/release/tux3 when it is
missing.
"""

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


def run_all(ctx, env, root, results, show):
    say("engine: building bench/engine")
    t0 = time.monotonic()
    try:
        binary = build(root)
        results.setdefault("timing", {})["engine_build_s"] = round(time.monotonic() - t0, 1)
    except CmdError as e:
        results["skipped"]["engine"] = "bench/engine does not build: %s" % str(e)[-300:]
        say("engine: SKIPPED: build failed")
        return
    dev = env.attach(env.backing_image())
    m = None
    try:
        m = env.setup("tmpfs")
        runs = [("syncs", "%dx%d" % (t, s), ["--tasks", t, "--steps", s]) for t, s in ctx.syncs]
        for sync in (False, True):
            for c in ctx.dbench_clients:
                runs.append(("dbench", "%d client%s%s" % (c, "" if c == 1 else "s",
                                                          ", -s" if sync else ""),
                             ["--clients", c, "--seconds", ctx.engine_dbench_secs,
                              "--loadfile", ctx.loadfile] + (["--sync"] if sync else [])))
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
                row = {"fs": "tux3-engine" if kind == "engine" else "tmpfs-syscalls",
                       "workload": "engine-" + load, "param": param, "error": ""}
                timeout = ctx.step_timeout + (ctx.engine_dbench_secs if load == "dbench" else 0)
                try:
                    rc, out, err = util.run([binary, load] + where + args, timeout=timeout, check=False)
                    res = last_json(out)
                    if rc != 0:
                        res["error"] = "exit %d: %s" % (rc, err.strip()[-300:])
                except CmdError as e:
                    res = {"error": str(e)[:300]}
                row.update(res)
                if load == "syncs":
                    row.update(figure=row.get("seconds"), unit="s", better="lower")
                else:
                    row.update(figure=row.get("mb_s"), unit="MB/s", better="higher")
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
