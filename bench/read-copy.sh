#!/bin/bash
# bench/read-copy.sh: what a cold sequential read through the mount costs
# the daemon, and how much of it is the host backing the page cache's
# fresh pages. Writes a file of SIZE MiB through a tux3 mount on a loop
# device over an image in SCRATCH, then reads it back RUNS times with fio
# (1 MiB reads, caches dropped first), alternating: as the machine is, and
# right after bench/c/touch.c has written to most free memory (so the host
# has mapped it again). The kernel copies each reply into the page cache in
# the daemon's context; on a virtual machine whose free pages go back to the
# host, the first write to such a page costs an exit to the host.
# Unmounts and detaches on every path. Root only.
#
# Usage: bench/read-copy.sh [SIZE_MIB] [RUNS] [SCRATCH]   (4096, 3, /var/tmp)
# Prints one line per read: the setting, MB/s, the daemon's CPU seconds and
# its CPU per MiB read.
set -u
SIZE=${1:-4096}
RUNS=${2:-3}
SCRATCH=${3:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=$ROOT/target/release/tux3
[ "$(id -u)" = 0 ] || { echo "read-copy: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "read-copy: build first (cargo build --release)" >&2; exit 2; }
command -v fio >/dev/null || { echo "read-copy: needs fio" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/read-copy.XXXXXX")
LOOP=
cleanup() {
    findmnt "$DIR/mnt" >/dev/null 2>&1 && timeout 60 umount "$DIR/mnt"
    wait
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

gcc -O2 -o "$DIR/touch" "$ROOT/bench/c/touch.c" || exit 1
# The image written in full, as bench/run does: no block left sparse.
dd if=/dev/zero of="$DIR/img" bs=64M count=$(( (SIZE * 2 + 1023) / 64 )) oflag=direct status=none || exit 1
LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || exit 1
mkdir "$DIR/mnt"
"$TUX3" mkfs "$LOOP" >/dev/null || exit 1
"$TUX3" mount "$LOOP" "$DIR/mnt" || exit 1
PID=$(pgrep -f "^$TUX3 mount $LOOP " | head -1)
[ -n "$PID" ] || { echo "read-copy: no daemon found" >&2; exit 1; }
fio --name=w --filename="$DIR/mnt/f" --rw=write --bs=1M --size=${SIZE}M --end_fsync=1 \
    --ioengine=psync >/dev/null || exit 1
# Most of what is free, less 1 GiB.
TOUCH=$(( $(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
HZ=$(getconf CLK_TCK)
for _ in $(seq "$RUNS"); do
    for setting in as-is touched; do
        sync
        echo 3 > /proc/sys/vm/drop_caches
        [ "$setting" = touched ] && "$DIR/touch" "$TOUCH"
        t0=$(ticks)
        mbs=$(fio --name=r --filename="$DIR/mnt/f" --rw=read --bs=1M --size=${SIZE}M \
            --ioengine=psync --output-format=json | python3 -c \
            'import json,sys; r=json.load(sys.stdin)["jobs"][0]["read"]; print("%.0f" % (r["io_bytes"] / 1e6 / (r["runtime"] / 1e3)))')
        t1=$(ticks)
        python3 -c 'import sys; s, mbs, t, hz, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]); print("%-8s %6s MB/s  daemon %.2f s CPU, %.0f us per MiB" % (s, mbs, t / hz, t / hz / size * 1e6))' \
            "$setting" "$mbs" $((t1 - t0)) "$HZ" "$SIZE"
    done
done
