#!/bin/bash
# bench/aging.sh: git-checkout aging (Conway et al., FAST'17) of tux3 against
# ext4, XFS and Btrfs, on an empty volume and on one filled to 90% first.
#
# For each fill level and filesystem, two volumes side by side, each on a
# loop device (direct I/O) over an image of VOL_MIB written in full in
# SCRATCH (the same two images for every filesystem, formatted again for
# each; tux3 through `tux3 mount`):
#   aged:  mkfs, mount, fill to FILL% (of df's used + available: 64 MiB
#          files of zeros, dd), `git clone --shared --no-checkout` of the
#          cached repository (bench/aging-repo.sh: every version of an npm
#          package, one commit each) into the volume (.git on the volume
#          holds the index and refs, the objects stay in the cache), then
#          CHECKOUTS `git checkout -f` of its commits (bench/aging-walk.py:
#          forward through the history with some back-and-forth, ending on
#          the last commit), timed whole;
#   fresh: mkfs, mount, the same fill, `cp -a` of the last commit's tree
#          (from `git archive`, on the host) in one go;
# then RUNS rounds of: both unmounted, caches dropped, both mounted again
# (for tux3 that also empties the server's caches), a cold `grep -r` of
# each tree (.git excluded) for a string it does not hold, the aged one
# first in odd rounds and the fresh one first in even ones, so that a slow
# spell of a shared disk falls on both. aged/fresh is the ratio of the
# medians: 1 means the history left no trace on how fast the tree reads.
# The loop devices' counters give the read I/Os and 4 KiB blocks of each
# grep and the blocks the checkouts wrote; a block-layer trace
# (block:block_rq_issue) gives where the reads went: the share that began
# where the one before ended, and the mean jump between them (MiB).
#
# Usage: bench/aging.sh [CHECKOUTS] [FILESYSTEMS] [FILLS] [VOL_MIB] [RUNS] [SCRATCH]
#        (defaults 1000, tux3,ext4,xfs,btrfs, 0,90, 2048, 3, /tmp)
#        AGING_PKG (default date-fns) picks the npm package (bench/aging-repo.sh).
# Prints a markdown table per fill level, with the per-filesystem lines
# before it as they come. Root; unmounts and detaches on every path.
set -u
ARGS="$*"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/space-lib.sh"
CHECKOUTS=${1:-1000}
FSS=${2:-tux3,ext4,xfs,btrfs}
FILLS=${3:-0,90}
VOL_MIB=${4:-2048}
RUNS=${5:-3}
SCRATCH=${6:-/tmp}
space_need_root aging
for t in git mkfs.ext4 mkfs.xfs mkfs.btrfs; do
    command -v $t >/dev/null || { echo "aging: needs $t" >&2; exit 2; }
done

REPO=$("$HERE/aging-repo.sh") || die "no repository"
space_init aging "$SCRATCH"
T_START=$(now)
mapfile -t COMMITS < <(git --git-dir="$REPO" rev-list --reverse HEAD)
N=${#COMMITS[@]}
mapfile -t WALK < <(python3 "$HERE/aging-walk.py" "$N" "$CHECKOUTS")
LAST=${COMMITS[N - 1]}
FINAL=$SPACE_DIR/final
mkdir "$FINAL"
git --git-dir="$REPO" archive "$LAST" | tar x -C "$FINAL" || die "git archive"
TREE_FILES=$(find "$FINAL" -type f | wc -l)
TREE_MIB=$(du -sm --apparent-size "$FINAL" | cut -f1)
NEEDLE="tux3-aging-needle-$$-not-in-the-tree"
say "repository $REPO: $N commits; last tree $TREE_FILES files, $TREE_MIB MiB; $CHECKOUTS checkouts"

# Two images, each written in full: the aged volume and the fresh one live
# side by side, so that their greps alternate and a slow spell of the
# shared disk hits both.
space_slot aged
space_image "$SPACE_DIR/img-aged" "$VOL_MIB"
space_attach "$SPACE_DIR/img-aged"
space_slot fresh
space_image "$SPACE_DIR/img-fresh" "$VOL_MIB"
space_attach "$SPACE_DIR/img-fresh"
RESULTS=$SPACE_DIR/results
: > "$RESULTS"

# volume FS FILL: a fresh volume in the current slot, mounted, filled to FILL%.
volume() {
    space_unmount
    space_mkfs "$1"
    space_mount "$1"
    ROOM=$(fs_room_kib)
    FILL_PCT=$(python3 -c "print('%.1f' % ($(fs_used_kib) * 100 / $ROOM))")
    if [ "$2" -gt 0 ]; then
        fill_to "$2" "$SPACE_MNT/fill" || die "fill to $2% failed on $1"
    fi
}

aged() { # FS FILL
    local fs=$1 fill=$2 t0 t1 s0 s1 i k=0 used
    space_slot aged
    volume "$fs" "$fill"
    timeout 600 git clone -q --shared --no-checkout "$REPO" "$SPACE_MNT/repo" || die "git clone on $fs"
    timeout 60 git -C "$SPACE_MNT/repo" config gc.auto 0
    space_sync
    s0=$(dev_stat)
    t0=$(now)
    for i in "${WALK[@]}"; do
        k=$((k + 1))
        timeout 600 git -C "$SPACE_MNT/repo" checkout -q -f "${COMMITS[i]}" \
            || die "checkout $k (commit $i) failed on $fs at $fill%"
        if [ $((k % 200)) = 0 ]; then
            say "$fs $fill%: $k checkouts, $(elapsed "$t0" "$(now)") s"
        fi
    done
    space_sync
    t1=$(now)
    s1=$(dev_stat)
    [ -z "$(timeout 600 git -C "$SPACE_MNT/repo" status --porcelain)" ] || die "$fs: the aged tree is not the last commit's"
    used=$(python3 -c "print('%.1f' % ($(fs_used_kib) * 100 / $ROOM))")
    echo "checkouts $fs $fill $(elapsed "$t0" "$t1") $(dev_delta "$s0" "$s1") $FILL_PCT $used" | tee -a "$RESULTS" >&2
}

fresh() { # FS FILL
    local fs=$1 fill=$2 t0 t1
    space_slot fresh
    volume "$fs" "$fill"
    t0=$(now)
    timeout 600 cp -a "$FINAL" "$SPACE_MNT/repo" || die "cp -a on $fs"
    space_sync
    t1=$(now)
    echo "copy $fs $fill $(elapsed "$t0" "$t1") $FILL_PCT" | tee -a "$RESULTS" >&2
}

# greps FS FILL: RUNS rounds of: both volumes unmounted, caches dropped,
# both mounted (tux3: its server's caches start empty too), then a grep of
# each, the aged one first in odd rounds, the fresh one first in even ones.
greps() {
    local fs=$1 fill=$2 r kind t0 t1 s0 s1
    for r in $(seq "$RUNS"); do
        space_slot aged; space_unmount
        space_slot fresh; space_unmount
        drop_caches
        space_slot aged; space_mount "$fs"
        space_slot fresh; space_mount "$fs"
        for kind in $([ $((r % 2)) = 1 ] && echo aged fresh || echo fresh aged); do
            space_slot "$kind"
            trace_reads_start
            s0=$(dev_stat)
            t0=$(now)
            timeout 600 grep -r -F --exclude-dir=.git "$NEEDLE" "$SPACE_MNT/repo"
            [ $? = 1 ] || die "grep of the $kind tree on $fs failed or found the needle"
            t1=$(now)
            s1=$(dev_stat)
            echo "grep $kind $fs $fill $(elapsed "$t0" "$t1") $(dev_delta "$s0" "$s1") $r $(trace_reads_stop)" \
                | tee -a "$RESULTS" >&2
        done
    done
    space_slot aged; space_unmount
    space_slot fresh; space_unmount
}

IFS=, read -ra FS_LIST <<< "$FSS"
IFS=, read -ra FILL_LIST <<< "$FILLS"
for fill in "${FILL_LIST[@]}"; do
    for fs in "${FS_LIST[@]}"; do
        say "== $fs, filled to $fill% first"
        aged "$fs" "$fill"
        fresh "$fs" "$fill"
        greps "$fs" "$fill"
    done
done
TRANSPORT=nouring
[ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ] && TRANSPORT=io_uring

md_header aging $ARGS
echo
python3 - "$RESULTS" "$CHECKOUTS" "$N" "$TREE_FILES" "$TREE_MIB" "$VOL_MIB" "$RUNS" \
    "$(elapsed "$T_START" "$(now)")" "$TRANSPORT" "${AGING_PKG:-date-fns}" <<'PY'
import statistics, sys
path, checkouts, n, files, mib, vol, runs, total, transport, pkg = sys.argv[1:]
rows = [l.split() for l in open(path)]
label = {"tux3": "tux3", "ext4": "ext4", "xfs": "XFS", "btrfs": "Btrfs"}
fills = []
for r in rows:
    if r[0] == "checkouts" and r[2] not in fills:
        fills.append(r[2])
print("%s checkouts over %s commits (npm package %s, every published version; last tree %s "
      "files, %s MiB) on a %s MiB volume; cold `grep -r` median of %s; fullness is "
      "used / (used + available) from df; tux3 over %s; "
      "the whole run %.0f s." % (checkouts, n, pkg, files, mib, vol, runs, transport, float(total)))
for fill in fills:
    print()
    print("Filled to %s%% before the checkouts (and before the fresh copy):" % fill)
    print()
    print("| filesystem | checkouts s (ms each) | blocks written | full before → after | fresh `cp -a` s "
          "| grep aged s | grep fresh s | **aged/fresh** | read I/Os aged / fresh "
          "| blocks read aged / fresh | sequential reads aged / fresh | mean jump MiB aged / fresh |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = {}
    for fs in [r[1] for r in rows if r[0] == "checkouts" and r[2] == fill]:
        co = next(r for r in rows if r[0] == "checkouts" and r[1] == fs and r[2] == fill)
        cp = next((r for r in rows if r[0] == "copy" and r[1] == fs and r[2] == fill), None)
        # grep rows: grep KIND FS FILL SECS rd_ios rd_blocks wr_ios wr_blocks flushes ROUND
        g = {k: [r for r in rows if r[0] == "grep" and r[1] == k and r[2] == fs and r[3] == fill]
             for k in ("aged", "fresh")}
        med = {k: statistics.median(float(r[4]) for r in v) if v else None for k, v in g.items()}
        ios = {k: statistics.median(int(r[5]) for r in v) if v else None for k, v in g.items()}
        blk = {k: statistics.median(int(r[6]) for r in v) if v else None for k, v in g.items()}
        ratio = med["aged"] / med["fresh"] if med["aged"] and med["fresh"] else None
        # from the block-layer trace: reads, sequential share, mean jump (MiB)
        def tr(k, i, f, scale=1):
            v = [float(r[i]) * scale for r in g[k] if len(r) > i and r[i] != "-"]
            return f % statistics.median(v) if v else "—"
        seqs = "%s / %s" % (tr("aged", 12, "%.0f%%", 100), tr("fresh", 12, "%.0f%%", 100))
        jump = "%s / %s" % (tr("aged", 13, "%.1f"), tr("fresh", 13, "%.1f"))
        ratios[fs] = ratio
        secs = float(co[3])
        print("| %s | %.1f (%.0f) | %s | %s%% → %s%% | %s | %s | %s | **%s** | %s / %s | %s / %s | %s | %s |" % (
            label.get(fs, fs), secs, secs * 1000 / int(checkouts), "{:,}".format(int(co[7])),
            co[9], co[10], "%s (%s%% full)" % (cp[3], cp[4]) if cp else "—",
            "%.3f" % med["aged"] if med["aged"] else "—",
            "%.3f" % med["fresh"] if med["fresh"] else "—",
            "%.2f" % ratio if ratio else "—",
            "{:,.0f}".format(ios["aged"] or 0), "{:,.0f}".format(ios["fresh"] or 0),
            "{:,.0f}".format(blk["aged"] or 0), "{:,.0f}".format(blk["fresh"] or 0), seqs, jump))
    t = ratios.get("tux3")
    peers = {f: r for f, r in ratios.items() if f != "tux3" and r}
    if t and peers:
        target = 1.05 if fill == "0" else 1.1
        print()
        print("tux3 aged/fresh %.2f: target at most %.2f %s; lower than every peer's (lowest %s "
              "%.2f) %s." % (t, target, "met" if t <= target else "not met",
                             label.get(min(peers, key=peers.get)), min(peers.values()),
                             "yes" if t < min(peers.values()) else "no"))
print()
def rounds(fs, fill):
    g = [r for r in rows if r[0] == "grep" and r[2] == fs and r[3] == fill]
    out = []
    for k in sorted({r[10] for r in g}, key=int):
        a = next((float(r[4]) for r in g if r[1] == "aged" and r[10] == k), None)
        f = next((float(r[4]) for r in g if r[1] == "fresh" and r[10] == k), None)
        if a and f:
            out.append("%.3f/%.3f" % (a, f))
    return " ".join(out)
print("Each round's greps, aged/fresh seconds: " + "; ".join(
    "%s %s%%: %s" % (label.get(fs, fs), fill, rounds(fs, fill))
    for fill in fills for fs in label
    if any(r[0] == "grep" and r[2] == fs and r[3] == fill for r in rows)) + ".")
PY
