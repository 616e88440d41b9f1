"""PNG plots of a run (matplotlib, Agg backend): syncs throughput against task
count on log axes, fsync latency distributions idle and under a background
writer, and device blocks and flushes per fsync. Returns the file names
drawn (in the plot directory).
"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from fsetup import FILESYSTEMS, LABEL  # noqa: E402

STYLE = {"tux3": dict(color="#d62728", lw=2.5, marker="o"),
         "tux3-devfuse": dict(color="#e377c2", lw=1.5, marker="o", ls="--"),
         "ext4": dict(color="#1f77b4", marker="s"),
         "ext4-fc": dict(color="#17becf", marker="s", ls="--"),
         "xfs": dict(color="#2ca02c", marker="^"),
         "btrfs": dict(color="#ff7f0e", marker="v"),
         "fuse2fs": dict(color="#9467bd", marker="D"),
         "tmpfs": dict(color="#7f7f7f", marker="x", ls=":")}


def _ok(r):
    return r and not r.get("error") and isinstance(r.get("figure"), (int, float))


def syncs_plot(rows, out):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    drawn = False
    for fs in FILESYSTEMS:
        pts = sorted((r["tasks"], r["figure"]) for r in rows
                     if r["fs"] == fs and r["workload"] == "syncs" and _ok(r)
                     and r.get("steps") == 10 and r.get("figure"))
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=LABEL[fs], **STYLE[fs])
            drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tasks (each: 10 x append 1 KiB + fsync)")
    ax.set_ylabel("fsyncs per second (higher is better)")
    ax.set_title("Parallel fsync: throughput against task count")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def latency_plot(rows, out):
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    drawn = False
    for ax, loaded in zip(axes, (False, True)):
        for fs in FILESYSTEMS:
            r = next((x for x in rows if x["fs"] == fs and x["workload"] == "fsync-load"
                      and x.get("loaded") == loaded and x.get("lat_ms")), None)
            if not r:
                continue
            lat = sorted(r["lat_ms"])
            ys = [(i + 1) / len(lat) for i in range(len(lat))]
            ax.step(lat, ys, where="post", label=LABEL[fs],
                    **{k: v for k, v in STYLE[fs].items() if k != "marker"})
            drawn = True
        ax.set_xscale("log")
        ax.set_xlabel("write 4 KiB + fsync latency, ms (log)")
        ax.set_title("with a background writer" if loaded else "idle")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("fraction of fsyncs at or below")
    if not drawn:
        plt.close(fig)
        return None
    axes[1].legend(fontsize=8)
    fig.suptitle("fsync latency distribution (CDF)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def per_fsync_plot(rows, out):
    sel = [r for r in rows if r["workload"] in ("syncs", "rename")
           and r.get("blocks_per_fsync") is not None and not r.get("error")]
    params = []
    for r in sel:
        k = (r["workload"], r["param"])
        if k not in params:
            params.append(k)
    fss = [f for f in FILESYSTEMS if any(r["fs"] == f for r in sel)]
    if not params or not fss:
        return None
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 1.6 * len(params) + 3), 7), sharex=True)
    width = 0.8 / len(fss)
    for ax, key, title in ((axes[0], "blocks_per_fsync", "4 KiB blocks written per fsync"),
                           (axes[1], "flushes_per_fsync", "device flushes per fsync")):
        for i, fs in enumerate(fss):
            ys = []
            for wl, p in params:
                r = next((x for x in sel if x["fs"] == fs and x["workload"] == wl
                          and x["param"] == p), None)
                ys.append(r.get(key) or 0 if r else 0)
            ax.bar([j + i * width for j in range(len(params))], ys, width, label=LABEL[fs],
                   color=STYLE[fs]["color"])
        ax.set_ylabel(title)
        ax.grid(True, axis="y", alpha=0.3)
    axes[1].set_xticks([j + 0.4 - width / 2 for j in range(len(params))])
    axes[1].set_xticklabels(["%s\n%s" % (wl, p.replace(" x 16000 B, ", "\n")) for wl, p in params],
                            fontsize=8)
    axes[0].legend(fontsize=8, ncol=3)
    axes[0].set_title("Device cost per fsync (lower is better)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def draw(res, outdir):
    os.makedirs(outdir, exist_ok=True)
    rows = res["rows"]
    done = []
    for name, fn in (("syncs.png", syncs_plot), ("fsync_load_latency.png", latency_plot),
                     ("per_fsync.png", per_fsync_plot)):
        path = os.path.join(outdir, name)
        if fn(rows, path):
            done.append(name)
        elif os.path.exists(path):
            os.unlink(path)
    return done
