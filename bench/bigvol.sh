#!/bin/bash
# bench/bigvol.sh: what a large volume's free space costs tux3 in memory and
# in mount time. A sparse image of SIZE (default the largest file the
# scratch filesystem takes: 16 TiB less 4 KiB on ext4 with 4 KiB blocks,
# else 15 TiB, 8 TiB, ...), the volume on the image itself (no loop device):
#   1. `tux3 mkfs`: time, blocks written, host disk used by the image;
#   2. mount of the empty volume (caches dropped first), RUNS times: the
#      mount command's time, the server's VmRSS and VmHWM (/proc/PID/status)
#      right after it and after a `df` and a first file;
#   3. DATA_GIB written and fragmented: files of SMALL_KIB (the whole of
#      DATA_GIB), every other one deleted, and the freed half refilled with
#      files of 3/2 SMALL_KIB (holes left between them), `tux3 sync`: the
#      time of each phase and the server's VmRSS / VmHWM after them;
#   4. clean mounts (unmount, drop caches, mount), RUNS times: time, RSS;
#   5. after a crash, RUNS times: a mount, 1,000 new files of 64 KiB and 500
#      of the old ones deleted, `tux3 sync` (durable), 100 more files not
#      synced, then kill -9 of the server, the dead mount detached, caches
#      dropped, and the mount timed (it replays the log); RSS after it;
#   6. `tux3 fsck` of the image (time, result);
#   7. resize and trim (PLACEHOLDER until `tux3 resize` and `tux3 fstrim`
#      exist: skipped with a message when `tux3 resize --help` fails):
#      shrink to half, grow back to max, fstrim, each timed, and the host
#      disk the image takes before and after the trim.
# Then, for reference, the empty-volume mkfs and mount times of ext4, XFS
# and Btrfs on a loop device over the same size (PEERS, default
# ext4,xfs,btrfs; empty skips).
# Before it writes, it checks the free space of SCRATCH: DATA_GIB * 1.5 +
# the image's metadata + 2 GiB must fit, else DATA_GIB is halved until it
# does, and the output says so.
#
# Usage: bench/bigvol.sh [SIZE] [DATA_GIB] [RUNS] [SCRATCH]
#        (defaults max, 8, 3, /tmp; SIZE in bytes or with K, M, G, T)
#        SMALL_KIB (default 256), PEERS (default ext4,xfs,btrfs).
# Prints a markdown table. Root; unmounts, ends the server and deletes the
# image on every path.
set -u
ARGS="$*"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/space-lib.sh"
SIZE_ARG=${1:-max}
DATA_GIB=${2:-8}
RUNS=${3:-3}
SCRATCH=${4:-/tmp}
SMALL_KIB=${SMALL_KIB:-256}
PEERS=${PEERS-ext4,xfs,btrfs}
space_need_root bigvol
space_init bigvol "$SCRATCH"
RESULTS=$SPACE_DIR/results
: > "$RESULTS"
NOTES=$SPACE_DIR/notes
: > "$NOTES"
note() { echo "$*" | tee -a "$NOTES" >&2; }
row() { echo "$*" | tee -a "$RESULTS" >&2; }

IMG=$SPACE_DIR/big.img
to_bytes() { numfmt --from=iec "$1"; }
if [ "$SIZE_ARG" = max ]; then
    SIZE=
    for s in $((16 * 2 ** 40 - 4096)) $((15 * 2 ** 40)) $((8 * 2 ** 40)) $((4 * 2 ** 40)) $((2 ** 40)); do
        if truncate -s "$s" "$IMG" 2>/dev/null; then SIZE=$s; break; fi
    done
    [ -n "$SIZE" ] || die "cannot make a sparse image of 1 TiB or more in $SCRATCH"
else
    SIZE=$(to_bytes "$SIZE_ARG") || die "bad size $SIZE_ARG"
    truncate -s "$SIZE" "$IMG" || die "cannot make a sparse image of $SIZE bytes in $SCRATCH"
fi
SIZE_H=$(numfmt --to=iec-i --suffix=B "$SIZE")
host_used() { du -k "$IMG" | cut -f1; } # KiB the image takes on the host

# The bitmap alone is a bit per block; leave 2 GiB besides.
avail_kib=$(df -k --output=avail "$SCRATCH" | tail -1 | tr -d ' ')
meta_kib=$((SIZE / 4096 / 8 / 1024))
want=$DATA_GIB
while [ "$DATA_GIB" -gt 0 ] && [ $((DATA_GIB * 1024 * 1024 * 3 / 2 + meta_kib + 2 * 1024 * 1024)) -gt "$avail_kib" ]; do
    DATA_GIB=$((DATA_GIB / 2))
done
[ "$DATA_GIB" -gt 0 ] || die "not enough room in $SCRATCH ($((avail_kib / 1024)) MiB free)"
[ "$DATA_GIB" = "$want" ] || note "scaled down: $want GiB of data would not fit in $SCRATCH ($((avail_kib / 1024)) MiB free); $DATA_GIB GiB written instead"

# VmRSS, VmHWM and VmData of the server, MiB. VmData counts memory the
# server allocated but never touched (a zeroed allocation is mapped lazily
# and only the pages written become resident), so it shows what a bitmap
# allocated whole costs once the volume is in use.
rss() {
    awk '/^VmRSS/ {r = $2} /^VmHWM/ {h = $2} /^VmData/ {d = $2}
         END {printf "%.1f %.1f %.1f", r / 1024, h / 1024, d / 1024}' "/proc/$SPACE_PID/status"
}
mount_row() { # LABEL: cold mount, then RSS after it and after df + a file
    space_unmount
    drop_caches
    space_mount tux3
    [ -n "$SPACE_PID" ] || die "no server process after the mount"
    local r1 r2
    r1=$(rss)
    df "$SPACE_MNT" >/dev/null
    echo x > "$SPACE_MNT/probe.$$"
    rm "$SPACE_MNT/probe.$$"
    r2=$(rss)
    row "mount $1 $SPACE_MOUNT_SECS $r1 $r2"
}

say "image $SIZE_H ($SIZE bytes); $DATA_GIB GiB of data"
# The baseline: the same mounts of an empty 1 GiB volume; what the large
# one takes beyond it grows with the size (the free-space map).
SMALL=$SPACE_DIR/small.img
timeout 600 "$TUX3" mkfs -q -s 1G "$SMALL" >/dev/null || die "mkfs of the 1 GiB volume"
SPACE_DEV=$SMALL
for r in $(seq "$RUNS"); do mount_row small; done
space_unmount
rm -f "$SMALL"
SPACE_DEV=$IMG
t0=$(now)
out=$(timeout 3600 /usr/bin/time -f "%M" "$TUX3" mkfs -s "$SIZE" "$IMG" 2>&1) || die "mkfs: $out"
t1=$(now)
blocks=$(echo "$out" | sed -n 's/^device: \([0-9]*\) blocks written.*/\1/p')
row "mkfs $(elapsed "$t0" "$t1") ${blocks:-?} $(( $(echo "$out" | tail -1) / 1024 )) $(( $(host_used) / 1024 ))"

for r in $(seq "$RUNS"); do mount_row empty; done

# 3. DATA_GIB in SMALL_KIB files, every other one deleted, refilled
n=$((DATA_GIB * 1024 * 1024 / SMALL_KIB))
big=$((SMALL_KIB * 3 / 2))
phase() { # NAME SECONDS
    row "phase $1 $2 $(rss) $(( $(host_used) / 1024 ))"
}
t0=$(now)
timeout 3600 python3 - "$SPACE_MNT/a" "$n" "$SMALL_KIB" <<'PY' || die "fill"
import os, sys
top, n, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = os.urandom(kib * 1024)
for d in range(64):
    os.makedirs(os.path.join(top, "d%02d" % d))
for i in range(n):
    with open(os.path.join(top, "d%02d" % (i % 64), "f%d" % i), "wb") as f:
        f.write(buf)
PY
space_sync
phase fill "$(elapsed "$t0" "$(now)")"
t0=$(now)
timeout 3600 python3 - "$SPACE_MNT/a" "$n" <<'PY' || die "free"
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
for i in range(0, n, 2):
    os.unlink(os.path.join(top, "d%02d" % (i % 64), "f%d" % i))
PY
space_sync
phase free "$(elapsed "$t0" "$(now)")"
t0=$(now)
timeout 3600 python3 - "$SPACE_MNT/b" "$((n / 3))" "$big" <<'PY' || die "refill"
import os, sys
top, n, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = os.urandom(kib * 1024)
for d in range(64):
    os.makedirs(os.path.join(top, "d%02d" % d))
for i in range(n):
    with open(os.path.join(top, "d%02d" % (i % 64), "g%d" % i), "wb") as f:
        f.write(buf)
PY
space_sync
phase refill "$(elapsed "$t0" "$(now)")"
row "used $(fs_used_kib)"

for r in $(seq "$RUNS"); do mount_row clean; done

# 5. crashes
for r in $(seq "$RUNS"); do
    timeout 600 python3 - "$SPACE_MNT" "$r" "$n" <<'PY' || die "crash writes"
import os, sys
mnt, r, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = os.urandom(65536)
top = os.path.join(mnt, "c%d" % r)
os.makedirs(top)
for i in range(1000):
    with open(os.path.join(top, "f%d" % i), "wb") as f:
        f.write(buf)
# 500 of the old files (odd ones are left after the free), spread out
for k in range(500):
    i = 1 + 2 * ((r * 500 + k) * 7919 % (n // 2))
    p = os.path.join(mnt, "a", "d%02d" % (i % 64), "f%d" % i)
    if os.path.exists(p):
        os.unlink(p)
PY
    timeout 300 "$TUX3" sync "$SPACE_MNT" || die "tux3 sync"
    timeout 600 python3 - "$SPACE_MNT/c$r" <<'PY' || die "unsynced writes"
import os, sys
buf = os.urandom(65536)
for i in range(100):
    with open(os.path.join(sys.argv[1], "u%d" % i), "wb") as f:
        f.write(buf)
PY
    kill -9 "$SPACE_PID"
    for _ in $(seq 100); do kill -0 "$SPACE_PID" 2>/dev/null || break; sleep 0.1; done
    SPACE_PID=
    timeout 60 umount "$SPACE_MNT" 2>/dev/null || umount -l "$SPACE_MNT"
    SPACE_FS=
    drop_caches
    space_mount tux3
    [ -n "$SPACE_PID" ] || die "no server process after the mount"
    [ -f "$SPACE_MNT/c$r/f999" ] || note "crash $r: a synced file is missing after the mount"
    r1=$(rss)
    df "$SPACE_MNT" >/dev/null
    row "mount crash $SPACE_MOUNT_SECS $r1 $(rss)"
done
space_unmount

t0=$(now)
fsck_out=$(timeout 1800 "$TUX3" fsck "$IMG" 2>&1)
fsck_rc=$?
row "fsck $(elapsed "$t0" "$(now)") $fsck_rc"
[ "$fsck_rc" = 0 ] || note "fsck exit $fsck_rc: $(echo "$fsck_out" | tail -3 | tr '\n' ' ')"

# ---------------------------------------------------------------------------
# 7. PLACEHOLDER: resize and trim. `tux3 resize TARGET SIZE|max` and
# `tux3 fstrim TARGET` are being written; until they exist this part only
# says so. TARGET is tried as the mount point first, then as the image.
# ---------------------------------------------------------------------------
timed() { # NAME CMD...: runs CMD, records its time and exit status
    local name=$1 t0 rc
    shift
    t0=$(now)
    timeout 3600 "$@" >"$SPACE_DIR/$name.out" 2>&1
    rc=$?
    row "$name $(elapsed "$t0" "$(now)") $rc"
    [ "$rc" = 0 ] || note "$name: $* exited $rc: $(tail -2 "$SPACE_DIR/$name.out" | tr '\n' ' ')"
    return $rc
}
if "$TUX3" resize --help >/dev/null 2>&1; then
    half=$(( SIZE / 2 / 4096 * 4096 ))
    space_mount tux3
    before=$(host_used)
    timed resize-shrink "$TUX3" resize "$SPACE_MNT" "$half" \
        || { space_unmount; timed resize-shrink "$TUX3" resize "$IMG" "$half"; space_mount tux3; }
    timed resize-grow "$TUX3" resize "$SPACE_MNT" max \
        || { space_unmount; timed resize-grow "$TUX3" resize "$IMG" max; space_mount tux3; }
    if "$TUX3" fstrim --help >/dev/null 2>&1; then
        timed fstrim "$TUX3" fstrim "$SPACE_MNT" \
            || { space_unmount; timed fstrim "$TUX3" fstrim "$IMG"; }
        row "trimmed $((before / 1024)) $(( $(host_used) / 1024 ))"
    else
        note "fstrim skipped: this tux3 has no fstrim command"
    fi
    space_unmount
else
    note "resize and fstrim skipped: this tux3 has no resize command (tux3 resize --help failed)"
fi
rm -f "$IMG"

# Peers, for reference: mkfs and mount time of an empty volume of SIZE.
IFS=, read -ra PEER_LIST <<< "$PEERS"
for fs in "${PEER_LIST[@]}"; do
    [ -n "$fs" ] || continue
    truncate -s "$SIZE" "$IMG"
    space_attach "$IMG"
    t0=$(now)
    case $fs in
    # the default lazy inode-table init: a full one writes 256 MiB per TiB
    ext4) timeout 600 mkfs.ext4 -F -q -E nodiscard "$SPACE_DEV" ;;
    *) space_mkfs "$fs" ;;
    esac || { note "$fs: mkfs failed"; space_detach; rm -f "$IMG"; continue; }
    mk=$(elapsed "$t0" "$(now)")
    for r in $(seq "$RUNS"); do
        drop_caches
        space_mount "$fs"
        row "peer $fs $mk $SPACE_MOUNT_SECS"
        space_unmount
    done
    space_detach
    rm -f "$IMG"
done

md_header bigvol $ARGS
echo
python3 - "$RESULTS" "$NOTES" "$SIZE_H" "$DATA_GIB" "$SMALL_KIB" "$RUNS" <<'PY'
import statistics, sys
path, notes, size, gib, kib, runs = sys.argv[1:]
rows = [l.split() for l in open(path)]
med = statistics.median
ms = lambda s: "%.0f ms" % (float(s) * 1000)
print("A sparse image of %s, `tux3 mkfs` on it, %s GiB written in %s KiB files, every other "
      "one deleted and the freed half refilled with %d KiB files; medians of %s mounts "
      "(caches dropped before each). RSS is the server's VmRSS, HWM its VmHWM (peak), from "
      "/proc/PID/status, in MiB." % (size, gib, kib, int(kib) * 3 // 2, runs))
print()
print("| step | time | server RSS / HWM / data after it, MiB | host disk used by the image |")
print("|---|---|---|---|")
mk = next((r for r in rows if r[0] == "mkfs"), None)
if mk:
    print("| `tux3 mkfs` (%s blocks written; mkfs's own peak RSS %s MiB) | %.1f s | — | %s MiB |" % (
        "{:,}".format(int(mk[2])) if mk[2].isdigit() else mk[2], mk[3], float(mk[1]), mk[4]))
def mounts(kind, text):
    m = [r for r in rows if r[0] == "mount" and r[1] == kind]
    if not m:
        return
    t = med(float(r[2]) for r in m)
    # mount KIND SECS rss hwm data (after the mount) rss hwm data (after df and a file)
    print("| %s (each: %s) | **%s** | %.0f / %.0f / %.0f after the mount; %.0f / %.0f / %.0f "
          "after df and a file | |" % (text, ", ".join(ms(r[2]) for r in m), ms(t),
                                       *[med(float(r[i]) for r in m) for i in range(3, 9)]))
mounts("small", "baseline: mount of an empty 1 GiB volume")
mounts("empty", "mount, empty volume")
for r in rows:
    if r[0] == "phase":
        print("| %s | %.1f s | %s / %s / %s | %s MiB |" % (
            {"fill": "write %s GiB in %s KiB files" % (gib, kib),
             "free": "delete every other file",
             "refill": "refill half in %d KiB files" % (int(kib) * 3 // 2)}[r[1]],
            float(r[2]), r[3], r[4], r[5], r[6]))
mounts("clean", "clean mount after the fill/free/refill")
mounts("crash", "mount after kill -9 (log replay)")
f = next((r for r in rows if r[0] == "fsck"), None)
if f:
    print("| `tux3 fsck` | %.1f s | exit %s | |" % (float(f[1]), f[2]))
for name, text in (("resize-shrink", "`tux3 resize` to half"), ("resize-grow", "`tux3 resize` to max"),
                   ("fstrim", "`tux3 fstrim`")):
    r = next((r for r in rows if r[0] == name), None)
    if r:
        print("| %s | %.1f s | exit %s | |" % (text, float(r[1]), r[2]))
t = next((r for r in rows if r[0] == "trimmed"), None)
if t:
    print("| host disk before / after the trim | | | %s / %s MiB |" % (t[1], t[2]))
peers = [r for r in rows if r[0] == "peer"]
if peers:
    print()
    print("For reference, an empty volume of the same size on a loop device:")
    print()
    print("| filesystem | mkfs | mount (median) |")
    print("|---|---|---|")
    for fs in dict.fromkeys(r[1] for r in peers):
        p = [r for r in peers if r[1] == fs]
        print("| %s | %.1f s | %s |" % ({"ext4": "ext4", "xfs": "XFS", "btrfs": "Btrfs"}.get(fs, fs),
                                       float(p[0][2]), ms(med(float(r[3]) for r in p))))
# targets
e = [r for r in rows if r[0] == "mount"]
if e:
    clean = [float(r[2]) for r in e if r[1] == "clean"]
    crash = [float(r[2]) for r in e if r[1] == "crash"]
    print()
    small = [float(r[6]) for r in e if r[1] == "small"]
    base = med(small) if small else 0
    worst_rss = max(float(r[6]) for r in e if r[1] != "small")
    small_d = [float(r[8]) for r in e if r[1] == "small"]
    worst_d = max(float(r[8]) for r in e if r[1] != "small")
    print("Targets: free-space memory at most 64 MiB: the largest RSS after a mount (and df "
          "and a file) of this volume less the 1 GiB volume's, %.0f MiB (%s), and of the "
          "data allocated (VmData, touched or not), %.0f MiB (%s); clean "
          "mount under 200 ms: %s (%s); after a crash under 1 s: %s (%s)." % (
              worst_rss - base, "met" if worst_rss - base <= 64 else "not met",
              worst_d - (med(small_d) if small_d else 0),
              "met" if worst_d - (med(small_d) if small_d else 0) <= 64 else "not met",
              ms(med(clean)) if clean else "—", "met" if clean and med(clean) < 0.2 else "not met",
              ms(med(crash)) if crash else "—", "met" if crash and med(crash) < 1 else "not met"))
n = open(notes).read().strip()
if n:
    print()
    print("Notes: " + " ".join(l.rstrip(".") + "." for l in n.splitlines()))
PY
