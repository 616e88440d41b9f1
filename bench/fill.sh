#!/bin/bash
# bench/fill.sh: writing into a full, fragmented volume, and the cost of
# allocating when nearly full, tux3 against ext4, XFS and Btrfs. Two parts,
# each filesystem on a loop device (direct I/O) in SCRATCH, tux3 through
# `tux3 mount`:
#
# 1. fill/free/refill (an image of VOL_MIB written in full, so that no write
#    lands on a hole of the host file): fill the volume to 95% with 1 MiB
#    files, delete every other one (47% of the volume free, in 1 MiB holes),
#    refill with 1 MiB files to 95% less the size of the write below; then a
#    sequential write of WRITE_MIB (default a tenth of the volume) into one
#    new file, 1 MiB writes then fsync (dd conv=fsync), which brings the
#    volume back to 95%, timed; then a cold read of that file (unmount, drop
#    caches, mount). The same write and read on the empty volume, formatted
#    fresh. RUNS of each (the file deleted and the deletion committed
#    between runs); medians, and full/empty.
# 2. allocation at fill levels (a sparse image of ALLOC_GIB GiB, filled with
#    fallocate so that the fill costs no host disk): fill to 10% and, on a
#    fresh volume, to 99% less the new files' data, then create FILES files
#    of 4 KiB each (100 directories) and sync (`tux3 sync` on tux3), timed
#    whole; RUNS of each, the levels alternating; the 99% time over the 10%
#    time (medians).
#
# Usage: bench/fill.sh [FILESYSTEMS] [VOL_MIB] [WRITE_MIB] [RUNS] [ALLOC_GIB] [FILES] [SCRATCH]
#        (defaults tux3,ext4,xfs,btrfs, 2048, VOL_MIB/10, 3, 16, 20000, /tmp)
#        FILL_PARTS=write,alloc (the default) picks the parts.
# Prints a markdown table per part. Root; unmounts and detaches on every path.
set -u
ARGS="$*"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/space-lib.sh"
FSS=${1:-tux3,ext4,xfs,btrfs}
VOL_MIB=${2:-2048}
WRITE_MIB=${3:-$((VOL_MIB / 10))}
RUNS=${4:-3}
ALLOC_GIB=${5:-16}
FILES=${6:-20000}
SCRATCH=${7:-/tmp}
PARTS=${FILL_PARTS:-write,alloc}
space_need_root fill
space_init fill "$SCRATCH"
T_START=$(now)
RESULTS=$SPACE_DIR/results
: > "$RESULTS"
IFS=, read -ra FS_LIST <<< "$FSS"

# seq_write FS STATE RUN: the timed write, then the cold read, of WRITE_MIB.
seq_write() {
    local s0 s1 t0 t1 t2 t3 w r
    local wt rt
    sync
    trace_reads_start
    s0=$(dev_stat)
    t0=$(now)
    timeout 600 dd if=/dev/zero of="$SPACE_MNT/seq" bs=1M count="$WRITE_MIB" conv=fsync status=none \
        || die "$1: the write of $WRITE_MIB MiB failed ($2)"
    t1=$(now)
    s1=$(dev_stat)
    wt=$(trace_reads_stop W)
    w=$(dev_delta "$s0" "$s1")
    space_cold
    trace_reads_start
    s0=$(dev_stat)
    t2=$(now)
    timeout 600 dd if="$SPACE_MNT/seq" of=/dev/null bs=1M status=none || die "$1: read back"
    t3=$(now)
    s1=$(dev_stat)
    rt=$(trace_reads_stop R)
    r=$(dev_delta "$s0" "$s1")
    echo "write $1 $2 $3 $(elapsed "$t0" "$t1") $(elapsed "$t2" "$t3") $w $r $(fs_used_kib) $ROOM $wt $rt" \
        | tee -a "$RESULTS" >&2
    rm "$SPACE_MNT/seq"
    space_sync
}

# Fill DIR with numbered files of 1 MiB, from FIRST, until PCT% of the room
# (fs_room_kib) is used, committing after each round so that df sees them.
fill_small() { # DIR PCT FIRST
    local dir=$1 pct=$2 i=$3 want size
    mkdir -p "$dir"
    size=$(fs_room_kib)
    want=$((size * pct / 100))
    while :; do
        local left=$(( (want - $(fs_used_kib)) / 1024 ))
        [ "$left" -gt 0 ] || break
        local k
        for k in $(seq "$left"); do
            if ! timeout 120 head -c 1048576 /dev/zero > "$dir/f$i" 2>/dev/null; then
                say "warning: $SPACE_FS full at $(fs_used_kib) KiB while filling to $pct%"
                rm -f "$dir/f$i"
                space_sync
                break 2
            fi
            i=$((i + 1))
        done
        space_sync
    done
    FILL_NEXT=$i
}

part_write() {
    local fs r free_pct
    IMG=$SPACE_DIR/img
    space_image "$IMG" "$VOL_MIB"
    space_attach "$IMG"
    for fs in "${FS_LIST[@]}"; do
        say "== $fs: sequential write of $WRITE_MIB MiB, empty volume"
        space_unmount
        space_mkfs "$fs"
        space_mount "$fs"
        ROOM=$(fs_room_kib)
        for r in $(seq "$RUNS"); do seq_write "$fs" empty "$r"; done
        say "== $fs: fill to 95% with 1 MiB files, free every other one, refill"
        space_unmount
        space_mkfs "$fs"
        space_mount "$fs"
        ROOM=$(fs_room_kib)
        fill_small "$SPACE_MNT/a" 95 0 || die "$fs: fill"
        local n=$FILL_NEXT i
        for ((i = 0; i < n; i += 2)); do rm "$SPACE_MNT/a/f$i"; done
        space_sync
        local after_free
        after_free=$(fs_used_kib)
        # leave room for the write, so that it brings the volume to 95%
        free_pct=$(( 95 - (WRITE_MIB * 1024 * 100 + ROOM - 1) / ROOM ))
        fill_small "$SPACE_MNT/b" "$free_pct" 0 || die "$fs: refill"
        echo "filled $fs $n $((after_free / 1024)) $FILL_NEXT $(fs_used_kib) $ROOM" | tee -a "$RESULTS" >&2
        for r in $(seq "$RUNS"); do seq_write "$fs" full "$r"; done
    done
    space_unmount
    space_detach
    rm -f "$IMG"
}

# the FILES small files and a commit, timed
small_files() { # FS LEVEL
    local t0 t1 s0 s1 d i
    sync
    s0=$(dev_stat)
    t0=$(now)
    timeout 1800 python3 - "$SPACE_MNT/small" "$FILES" <<'PY' || die "$1: small files"
import os, sys
top, n = sys.argv[1], int(sys.argv[2])
buf = b"s" * 4096
for d in range(100):
    os.makedirs(os.path.join(top, "d%02d" % d))
for i in range(n):
    fd = os.open(os.path.join(top, "d%02d" % (i % 100), "f%d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, buf)
    os.close(fd)
PY
    space_sync
    sync
    t1=$(now)
    s1=$(dev_stat)
    echo "alloc $1 $2 $(elapsed "$t0" "$t1") $(dev_delta "$s0" "$s1") $(fs_used_kib) $ROOM $BEFORE" \
        | tee -a "$RESULTS" >&2
}

# fallocate files of at most 1 GiB into DIR until KIB_WANTED KiB are used
falloc_to() { # DIR KIB_WANTED
    local dir=$1 want=$2 i=0 left c
    mkdir -p "$dir"
    for round in 1 2 3; do
        left=$(( (want - $(fs_used_kib)) / 1024 ))
        while [ "$left" -gt 0 ]; do
            c=1024
            [ "$left" -lt "$c" ] && c=$left
            i=$((i + 1))
            if ! timeout 600 fallocate -l "${c}M" "$dir/fill.$i" 2>/dev/null; then
                say "warning: $SPACE_FS full at $(fs_used_kib) KiB while filling to $want KiB"
                rm -f "$dir/fill.$i"
                break 2
            fi
            left=$((left - c))
        done
        space_sync
    done
}

part_alloc() {
    local fs level want
    IMG=$SPACE_DIR/sparse
    truncate -s "${ALLOC_GIB}G" "$IMG"
    space_attach "$IMG"
    for fs in "${FS_LIST[@]}"; do
        # RUNS rounds, the levels alternating, each on a volume made afresh
        for level in $(for r in $(seq "$RUNS"); do echo 10 99; done); do
            say "== $fs: $FILES files of 4 KiB at $level% full"
            space_unmount
            space_mkfs "$fs"
            space_mount "$fs"
            ROOM=$(fs_room_kib)
            want=$(( ROOM * level / 100 ))
            # at 99%: what the files will hold is left free (4 KiB each)
            [ "$level" = 99 ] && want=$((want - FILES * 4))
            falloc_to "$SPACE_MNT/fill" "$want" || die "$fs: fallocate to $level%"
            space_sync
            BEFORE=$(python3 -c "print('%.1f' % ($(fs_used_kib) * 100 / $ROOM))")
            drop_caches
            small_files "$fs" "$level"
        done
    done
    space_unmount
    space_detach
    rm -f "$IMG"
}

case ",$PARTS," in *,write,*) part_write ;; esac
case ",$PARTS," in *,alloc,*) part_alloc ;; esac
TRANSPORT=/dev/fuse
[ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ] && TRANSPORT=io_uring

md_header fill $ARGS
echo
python3 - "$RESULTS" "$VOL_MIB" "$WRITE_MIB" "$RUNS" "$ALLOC_GIB" "$FILES" \
    "$(elapsed "$T_START" "$(now)")" "$TRANSPORT" <<'PY'
import statistics, sys
path, vol, wmib, runs, agib, files, total, transport = sys.argv[1:]
rows = [l.split() for l in open(path)]
label = {"tux3": "tux3", "ext4": "ext4", "xfs": "XFS", "btrfs": "Btrfs"}
med = statistics.median
fss = []
for r in rows:
    if r[1] not in fss:
        fss.append(r[1])
print("tux3 over %s; the whole run %.0f s." % (transport, float(total)))
w = [r for r in rows if r[0] == "write"]
if w:
    print()
    print("Sequential write of %s MiB (1 MiB writes, fsync) on a %s MiB volume, empty and after "
          "fill to 95%% / free every other file / refill (the write brings it back to 95%%; "
          "fullness is used / (used + available) from df); "
          "median of %s; then a cold read of the file." % (wmib, vol, runs))
    print()
    print("| filesystem | write MB/s empty | write MB/s full | **full/empty** | write I/Os empty / full "
          "| sequential writes empty / full "
          "| read MB/s empty | read MB/s full | read full/empty | read I/Os empty / full "
          "| sequential reads empty / full | used after the write |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for fs in fss:
        e = [r for r in w if r[1] == fs and r[2] == "empty"]
        f = [r for r in w if r[1] == fs and r[2] == "full"]
        if not e or not f:
            continue
        mb = int(wmib) * 1048576 / 1e6
        we, wf = med(mb / float(r[4]) for r in e), med(mb / float(r[4]) for r in f)
        re_, rf = med(mb / float(r[5]) for r in e), med(mb / float(r[5]) for r in f)
        wio = lambda rs: med(int(r[8]) for r in rs)
        rio = lambda rs: med(int(r[11]) for r in rs)
        used = int(f[-1][16]) * 100 / int(f[-1][17])
        # block-layer trace: writes n seq dist (18-20), reads n seq dist (21-23)
        def sq(rs, i):
            v = [float(r[i]) * 100 for r in rs if len(r) > i and r[i] != "-"]
            return "%.0f%%" % med(v) if v else "—"
        print("| %s | %.0f | %.0f | **%.2f** | %s / %s | %s / %s | %.0f | %.0f | %.2f | %s / %s | %s / %s "
              "| %.1f%% |" % (
            label.get(fs, fs), we, wf, wf / we, "{:,}".format(wio(e)), "{:,}".format(wio(f)),
            sq(e, 19), sq(f, 19),
            re_, rf, rf / re_, "{:,}".format(rio(e)), "{:,}".format(rio(f)), sq(e, 22), sq(f, 22), used))
    fl = [r for r in rows if r[0] == "filled"]
    if fl:
        print()
        print("Fill: " + "; ".join("%s %s files of 1 MiB, %s MiB used after freeing every other, "
                                   "%s refill files" % (label.get(r[1], r[1]), r[2], r[3], r[4])
                                   for r in fl) + ".")
    print()
    print("Each write's MB/s (empty | full): " + "; ".join(
        "%s %s | %s" % (label.get(fs, fs),
                        " ".join("%.0f" % (int(wmib) * 1.048576 / float(r[4])) for r in w
                                 if r[1] == fs and r[2] == "empty"),
                        " ".join("%.0f" % (int(wmib) * 1.048576 / float(r[4])) for r in w
                                 if r[1] == fs and r[2] == "full")) for fs in fss
        if any(r[1] == fs for r in w)) + ".")
a = [r for r in rows if r[0] == "alloc"]
if a:
    print()
    print("%s files of 4 KiB in 100 directories, created, written and synced, on a %s GiB volume "
          "filled with fallocate to 10%% and to 99%% less the files' data; median of %s, the levels "
          "alternating, each on a volume made afresh." % ("{:,}".format(int(files)), agib, runs))
    print()
    print("| filesystem | 10% full s | 99% full s | **99%/10%** | each run 10% / 99%, s "
          "| blocks written 10% / 99% | full before → after, 10% / 99% |")
    print("|---|---|---|---|---|---|---|")
    # alloc FS LEVEL SECS rd_ios rd_blocks wr_ios wr_blocks flushes USED ROOM BEFORE
    for fs in fss:
        lo = [r for r in a if r[1] == fs and r[2] == "10"]
        hi = [r for r in a if r[1] == fs and r[2] == "99"]
        if not lo or not hi:
            continue
        tl, th = med(float(r[3]) for r in lo), med(float(r[3]) for r in hi)
        print("| %s | %.2f | %.2f | **%.2f** | %s / %s | %s / %s | %s%% → %.1f%% / %s%% → %.1f%% |" % (
            label.get(fs, fs), tl, th, th / tl,
            " ".join("%.2f" % float(r[3]) for r in lo), " ".join("%.2f" % float(r[3]) for r in hi),
            "{:,}".format(med(int(r[7]) for r in lo)), "{:,}".format(med(int(r[7]) for r in hi)),
            lo[-1][11], int(lo[-1][9]) * 100 / int(lo[-1][10]),
            hi[-1][11], int(hi[-1][9]) * 100 / int(hi[-1][10])))
PY
