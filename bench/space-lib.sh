#!/bin/bash
# bench/space-lib.sh: helpers shared by the space benchmarks (aging.sh,
# fill.sh, bigvol.sh), sourced, not run. One loop device at a time over an
# image in a scratch directory of the script's own, tux3 (through `tux3
# mount`) or a kernel filesystem on it; everything this file sets up is
# recorded and undone by space_cleanup, which the scripts run on every exit
# path (trap). It detaches only the loop devices, and ends only the tux3
# servers, it created.
#
# Needs: root, losetup, mkfs.ext4, mkfs.xfs, mkfs.btrfs, python3, timeout.
# The tux3 binary: $TUX3, else $CARGO_TARGET_DIR/release/tux3, else
# target/release/tux3.

SPACE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TUX3=${TUX3:-${CARGO_TARGET_DIR:-$SPACE_ROOT/target}/release/tux3}
SPACE_DIR=      # the scratch directory (space_init)
SPACE_LOOP=     # the loop device attached now, if any
SPACE_DEV=      # what mkfs and mount are given: the loop device, or an image
SPACE_MNT=      # the mount point
SPACE_FS=       # the filesystem mounted there now, if any
SPACE_PID=      # the tux3 server of that mount
SPACE_KEEP=${SPACE_KEEP:-}  # set: leave the scratch directory (debugging)

say() { echo "[$(date +%H:%M:%S)] $*" >&2; }
die() { say "error: $*"; exit 1; }
now() { date +%s.%N; }
# seconds between two `now` readings, 3 decimals
elapsed() { python3 -c "print('%.3f' % ($2 - $1))"; }

space_need_root() {
    [ "$(id -u)" = 0 ] || { echo "$1: run as root" >&2; exit 2; }
    [ -x "$TUX3" ] || { echo "$1: no $TUX3 (cargo build --release, or set TUX3)" >&2; exit 2; }
}

# space_init NAME SCRATCH: a fresh scratch directory SCRATCH/NAME.XXXXXX
# and the traps that undo everything on exit.
space_init() {
    mkdir -p "$2"
    SPACE_DIR=$(mktemp -d "$2/$1.XXXXXX") || exit 1
    SPACE_MNT=$SPACE_DIR/mnt
    mkdir "$SPACE_MNT"
    trap space_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Slots: more than one volume at a time (aging.sh greps an aged and a fresh
# volume in turn). `space_slot NAME` puts the current loop device, mount
# point, filesystem and server away under the current slot's name and takes
# NAME's (a new one: nothing attached, mount point SPACE_DIR/mnt-NAME).
declare -A SLOT_LOOP SLOT_DEV SLOT_MNT SLOT_FS SLOT_PID
SPACE_SLOT=main
space_slot() {
    SLOT_LOOP[$SPACE_SLOT]=$SPACE_LOOP SLOT_DEV[$SPACE_SLOT]=$SPACE_DEV
    SLOT_MNT[$SPACE_SLOT]=$SPACE_MNT SLOT_FS[$SPACE_SLOT]=$SPACE_FS SLOT_PID[$SPACE_SLOT]=$SPACE_PID
    SPACE_SLOT=$1
    if [ -z "${SLOT_MNT[$1]+set}" ]; then
        SLOT_LOOP[$1]= SLOT_DEV[$1]= SLOT_FS[$1]= SLOT_PID[$1]=
        SLOT_MNT[$1]=$SPACE_DIR/mnt-$1
        mkdir -p "${SLOT_MNT[$1]}"
    fi
    SPACE_LOOP=${SLOT_LOOP[$1]} SPACE_DEV=${SLOT_DEV[$1]} SPACE_MNT=${SLOT_MNT[$1]}
    SPACE_FS=${SLOT_FS[$1]} SPACE_PID=${SLOT_PID[$1]}
}

space_cleanup() {
    set +e
    local s
    [ -n "$TRACE_DIR" ] && [ -d "$TRACE_DIR" ] && { echo 0 > "$TRACE_DIR/tracing_on"; rmdir "$TRACE_DIR"; }
    space_slot "$SPACE_SLOT"
    for s in "${!SLOT_MNT[@]}"; do
        space_slot "$s"
        space_unmount
        space_detach
    done
    if [ -z "$SPACE_KEEP" ] && [ -n "$SPACE_DIR" ]; then
        rm -rf "$SPACE_DIR"
    fi
}

# The tux3 server serving our mount (the newest `tux3 mount` process naming
# our loop device): the server forks from the command we ran.
tux3_server_pid() {
    local p
    for p in $(pgrep -x tux3); do
        if { tr '\0' ' ' < "/proc/$p/cmdline"; } 2>/dev/null | grep -qF -- " $SPACE_DEV $SPACE_MNT"; then
            echo "$p"
        fi
    done | tail -1
}

# space_image FILE MIB: an image of MIB MiB written in full (every block
# allocated in the host filesystem, as on a disk), kept if it exists.
space_image() {
    local f=$1 mib=$2
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" = $((mib << 20)) ]; then
        return 0
    fi
    say "writing a $mib MiB image in full"
    timeout 3600 dd if=/dev/zero of="$f" bs=16M count=$((mib / 16)) oflag=direct conv=fsync status=none \
        || die "cannot write $f"
}

space_attach() { # FILE
    SPACE_LOOP=$(losetup --direct-io=on -f --show "$1") || die "losetup $1"
    SPACE_DEV=$SPACE_LOOP
}

space_detach() {
    if [ -n "$SPACE_LOOP" ]; then
        local i
        for i in 1 2 3 4 5; do
            losetup -d "$SPACE_LOOP" 2>/dev/null && break
            sleep 1
        done
        SPACE_LOOP=
        SPACE_DEV=
    fi
}

# space_mkfs FS: format the attached loop device (no discard: the image stays
# allocated in the host filesystem).
space_mkfs() {
    case $1 in
    tux3) timeout 1800 "$TUX3" mkfs -q "$SPACE_DEV" >/dev/null ;;
    ext4) timeout 300 mkfs.ext4 -F -q -m 0 -E lazy_itable_init=0,lazy_journal_init=0,nodiscard "$SPACE_DEV" ;;
    xfs) timeout 300 mkfs.xfs -f -q -K "$SPACE_DEV" ;;
    btrfs) timeout 300 mkfs.btrfs -f -q -K "$SPACE_DEV" >/dev/null ;;
    *) die "unknown filesystem $1" ;;
    esac || die "mkfs $1 failed"
}

# space_mount FS: mount the attached loop device on SPACE_MNT; the seconds
# the mount command took go in SPACE_MOUNT_SECS. (Not to be called in a
# subshell: it records the mount in this shell's variables.)
space_mount() {
    local t0 t1
    SPACE_FS=$1
    t0=$(now)
    case $1 in
    tux3) timeout 120 "$TUX3" mount "$SPACE_DEV" "$SPACE_MNT" ;;
    btrfs) timeout 120 mount -t btrfs -o nodiscard "$SPACE_DEV" "$SPACE_MNT" ;;
    *) timeout 120 mount -t "$1" "$SPACE_DEV" "$SPACE_MNT" ;;
    esac || { findmnt "$SPACE_MNT" >/dev/null || SPACE_FS=; die "mount $1 failed"; }
    t1=$(now)
    [ "$1" = tux3 ] && SPACE_PID=$(tux3_server_pid)
    SPACE_MOUNT_SECS=$(elapsed "$t0" "$t1")
}

# Wait up to 120 s for our tux3 server to exit (umount(2) returns before it
# has committed and closed the volume); kill it if it does not.
space_wait_server() {
    [ -n "$SPACE_PID" ] || return 0
    local i
    for i in $(seq 1200); do
        kill -0 "$SPACE_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SPACE_PID" 2>/dev/null; then
        say "warning: tux3 server $SPACE_PID still running after unmount; killing it"
        kill -9 "$SPACE_PID"
    fi
    SPACE_PID=
}

space_unmount() {
    if [ -n "$SPACE_MNT" ] && findmnt "$SPACE_MNT" >/dev/null 2>&1; then
        if [ "$SPACE_FS" = tux3 ]; then
            timeout 300 "$TUX3" umount "$SPACE_MNT" || timeout 120 umount "$SPACE_MNT" || umount -l "$SPACE_MNT"
        else
            timeout 300 umount "$SPACE_MNT" || umount -l "$SPACE_MNT"
        fi
    fi
    space_wait_server
    SPACE_FS=
}

# Make everything durable (tux3: `tux3 sync`, which syncfs does not reach).
space_sync() {
    if [ "$SPACE_FS" = tux3 ]; then
        timeout 300 "$TUX3" sync "$SPACE_MNT" || die "tux3 sync failed"
    fi
    sync -f "$SPACE_MNT"
}

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# Cold cache for the mounted filesystem: unmount, drop the caches, mount
# (for tux3 this also empties the server's own caches). The mount's seconds
# go in SPACE_MOUNT_SECS.
space_cold() {
    local fs=$SPACE_FS
    space_unmount
    drop_caches
    space_mount "$fs"
}

# The loop device's counters: read I/Os, 4 KiB blocks read, write I/Os,
# 4 KiB blocks written, flushes (Documentation/block/stat.rst).
dev_stat() {
    awk '{print $1, int($3 / 8), $5, int($7 / 8), $16}' "/sys/block/$(basename "$SPACE_LOOP")/stat"
}
# dev_delta "BEFORE" "AFTER": the difference of two dev_stat lines.
dev_delta() {
    python3 -c 'import sys; a, b = sys.argv[1].split(), sys.argv[2].split(); print(" ".join(str(int(y) - int(x)) for x, y in zip(a, b)))' "$1" "$2"
}

# Blocks in use and in total on the mounted filesystem (1 KiB units, df).
fs_used_kib() { df -k --output=used "$SPACE_MNT" | tail -1 | tr -d ' '; }
fs_size_kib() { df -k --output=size "$SPACE_MNT" | tail -1 | tr -d ' '; }
fs_avail_kib() { df -k --output=avail "$SPACE_MNT" | tail -1 | tr -d ' '; }

# The space a user can fill, in KiB: used + available (df). Fullness in
# these benchmarks is used / (used + available), so that space a
# filesystem keeps for itself (Btrfs's metadata chunks, XFS's log) does not
# count as free. (ext4 is made with -m 0: no blocks kept for root.)
fs_room_kib() { df -k --output=used,avail "$SPACE_MNT" | tail -1 | awk '{print $1 + $2}'; }

# fill_to PCT DIR [CHUNK_MIB]: write files of CHUNK_MIB (default 64) MiB
# into DIR until PCT% of the room (fs_room_kib) is used (the last file of a
# round is cut to fit), committing after each round so that df counts what
# was written, and topping up until within a MiB. Data from /dev/zero with
# dd, not fallocate, so that every filesystem writes and allocates the same
# way. A write that finds the volume full ends the fill there, with a
# warning. The number of files goes in FILL_FILES, the fullness reached (%)
# in FILL_PCT.
fill_to() {
    local pct=$1 dir=$2 chunk=${3:-64} room want left c round
    mkdir -p "$dir"
    room=$(fs_room_kib)
    want=$((room * pct / 100))
    FILL_FILES=0
    for round in 1 2 3 4 5; do
        left=$(( (want - $(fs_used_kib)) / 1024 ))
        [ "$left" -gt 0 ] || break
        while [ "$left" -gt 0 ]; do
            c=$chunk
            [ "$left" -lt "$c" ] && c=$left
            FILL_FILES=$((FILL_FILES + 1))
            if ! timeout 600 dd if=/dev/zero of="$dir/fill.$FILL_FILES" bs=1M count="$c" status=none 2>/dev/null; then
                say "warning: $SPACE_FS full at $(fs_used_kib) of $room KiB while filling to $pct%"
                space_sync
                break 2
            fi
            left=$((left - c))
        done
        space_sync
    done
    FILL_PCT=$(python3 -c "print('%.1f' % ($(fs_used_kib) * 100 / $room))")
}

# md_header NAME ARGS...: the head of the markdown a script prints: the
# comment that says where it comes from, then the machine, the build and
# the date.
md_header() {
    local name=$1
    shift
    local cpu commit
    cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
    commit=$(git -C "$SPACE_ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
    echo "<!-- Written by bench/$name.sh (make bench-aging); bench/py/report.py copies it into"
    echo "docs/BENCHMARKS.md. -->"
    echo "Measured by \`bench/$name.sh${*:+ $*}\` on $cpu ($(nproc) cores, $(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo) GiB, Linux $(uname -r)), tux3 at $commit, $(date -u '+%Y-%m-%d %H:%M') UTC."
}

# Where the reads go: the block layer's requests issued to the current loop
# device (tracepoint block:block_rq_issue, in a tracing instance of this
# script's own, removed on exit). trace_reads_start before a step,
# trace_reads_stop after it prints (for writes: trace_reads_stop W): reads, the share of them that start
# where the one before ended (sequential), and the mean distance in MiB
# from the end of one read to the start of the next. On an SSD or a
# virtual disk the distance costs little time, but it is the layout's own
# measure, free of the disk's latency. Prints "- - -" without tracefs.
TRACE_DIR=
trace_reads_start() {
    local t=/sys/kernel/tracing
    [ -d $t/instances ] || t=/sys/kernel/debug/tracing
    if [ -z "$TRACE_DIR" ]; then
        [ -d $t/instances ] && [ -d $t/events/block/block_rq_issue ] || return 0
        TRACE_DIR=$t/instances/tux3-space-$$
        mkdir "$TRACE_DIR" 2>/dev/null || { TRACE_DIR=; return 0; }
        echo 16384 > "$TRACE_DIR/buffer_size_kb"
    fi
    local mm
    mm=$(cat "/sys/block/$(basename "$SPACE_LOOP")/dev")
    echo 0 > "$TRACE_DIR/tracing_on"
    echo "dev == $(( (${mm%:*} << 20) | ${mm#*:} ))" > "$TRACE_DIR/events/block/block_rq_issue/filter"
    echo 1 > "$TRACE_DIR/events/block/block_rq_issue/enable"
    : > "$TRACE_DIR/trace"
    echo 1 > "$TRACE_DIR/tracing_on"
}
trace_reads_stop() { # [R|W]: reads (default) or writes
    local kind=${1:-R}
    if [ -z "$TRACE_DIR" ]; then
        echo "- - -"
        return 0
    fi
    echo 0 > "$TRACE_DIR/tracing_on"
    python3 -c '
import re, sys
reads = []
for line in open(sys.argv[1]):
    m = re.search(r"block_rq_issue: \d+,\d+ (\S+) \d+ \(.*?\) (\d+) \+ (\d+)", line)
    if m and sys.argv[2] in m.group(1):
        reads.append((int(m.group(2)), int(m.group(3))))
seq, dist, end = 0, 0, None
for start, n in reads:
    if end is not None:
        seq += start == end
        dist += abs(start - end)
    end = start + n
k = max(len(reads) - 1, 1)
print(len(reads), "%.3f" % (seq / k), "%.2f" % (dist * 512 / k / 1048576))
' "$TRACE_DIR/trace" "$kind"
}
