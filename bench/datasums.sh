#!/bin/bash
# bench/datasums.sh: what data checksums cost through the mount. The same
# build on the same storage, a volume made by `tux3 mkfs` (a CRC32C per data
# block, verified on every device read) against one made with
# `tux3 mkfs --no-data-sums`, in interleaved rounds (sums, none, sums, ...),
# each on a fresh volume: a sequential write of SIZE MiB (1 MiB writes and
# a final fsync), a cold sequential read of it, 4 KiB random reads of it
# for SECONDS (cold cache), and SIZE/8 MiB of 4 KiB random writes into it
# (buffered, a final fsync). The caches are dropped (after a sync) before every
# phase. One loop device with direct I/O over an image written in full (no
# block left sparse, as bench/run does), formatted again for each volume.
# Unmounts and detaches on every path. Root only.
#
# With DIO=off the image is written and attached without direct I/O: for a
# SCRATCH on tmpfs (/dev/shm), where the device costs no time, so that what is
# left to compare is the CPU of each path (the 4 KiB random phases are the
# device's own noise on a real disk here).
#
# Usage: bench/datasums.sh [ROUNDS] [SIZE_MIB] [SECONDS] [SCRATCH]
#        (defaults 5, 1024, 10, /var/tmp)
# The tux3 binary: $TUX3, else $CARGO_TARGET_DIR/release/tux3, else
# target/release/tux3. Prints one line per phase and volume (MB/s or IOPS,
# the daemon's CPU seconds, the loop device's reads and writes in I/Os and
# 4 KiB blocks), then the medians of each kind and their ratio
# (sums / none: below 1 checksums cost that share).
set -u
ROUNDS=${1:-5}
SIZE=${2:-1024}
SECONDS_=${3:-10}
SCRATCH=${4:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tux3}
[ "$(id -u)" = 0 ] || { echo "datasums: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "datasums: build first (cargo build --release)" >&2; exit 2; }
command -v fio >/dev/null || { echo "datasums: needs fio" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/datasums.XXXXXX")
MNT=$DIR/mnt
LOOP=
cleanup() {
    if findmnt "$MNT" >/dev/null 2>&1; then
        timeout 120 umount "$MNT" || umount -l "$MNT"
    fi
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# Room for the file, the random writes' copies and the metadata.
IMG_MIB=$(( (SIZE * 3 + 1023) / 1024 * 1024 ))
DIO=${DIO:-on}
if [ "$DIO" = on ]; then
    dd if=/dev/zero of="$DIR/img" bs=64M count=$(( IMG_MIB / 64 )) oflag=direct status=none || exit 1
else
    dd if=/dev/zero of="$DIR/img" bs=64M count=$(( IMG_MIB / 64 )) status=none || exit 1
fi
LOOP=$(losetup --direct-io="$DIO" -f --show "$DIR/img") || exit 1
STAT=/sys/block/$(basename "$LOOP")/stat
mkdir "$MNT"
HZ=$(getconf CLK_TCK)
RESULTS=$DIR/results
: > "$RESULTS"

fio_rate() { # fio json on stdin, "read" or "write", mbs|iops
    python3 -c '
import json, sys
r = json.load(sys.stdin)["jobs"][0][sys.argv[1]]
t = r["runtime"] / 1e3
print("%.1f" % (r["io_bytes"] / 1e6 / t if sys.argv[2] == "mbs" else r["total_ios"] / t))' "$1" "$2"
}

# One phase: drop the caches, then run fio with the given arguments; prints
# kind, phase, rate, daemon CPU s, read I/Os, blocks read, write I/Os,
# blocks written.
phase() {
    local kind=$1 name=$2 dir=$3 unit=$4
    shift 4
    sync
    echo 3 > /proc/sys/vm/drop_caches
    local pid t0 t1 s0 s1 rate
    pid=$(pgrep -xf "$TUX3 mount $LOOP $MNT" | head -1)
    t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    read -ra s0 < "$STAT"
    rate=$(fio --name="$name" --filename="$MNT/f" --output-format=json "$@" | fio_rate "$dir" "$unit") || exit 1
    read -ra s1 < "$STAT"
    t1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    echo "$kind $name $rate $(python3 -c "print('%.2f' % (($t1 - $t0) / $HZ))") \
$(( s1[0] - s0[0] )) $(( (s1[2] - s0[2]) / 8 )) $(( s1[4] - s0[4] )) $(( (s1[6] - s0[6]) / 8 ))" | tee -a "$RESULTS"
}

one() { # sums|none
    local kind=$1
    if [ "$kind" = sums ]; then
        "$TUX3" mkfs "$LOOP" >/dev/null || exit 1
    else
        "$TUX3" mkfs --no-data-sums "$LOOP" >/dev/null || exit 1
    fi
    "$TUX3" mount "$LOOP" "$MNT" || exit 1
    phase "$kind" seqwrite write mbs --rw=write --bs=1M --size="${SIZE}M" --end_fsync=1 --ioengine=psync
    "$TUX3" sync "$MNT" || exit 1
    phase "$kind" seqread read mbs --rw=read --bs=1M --size="${SIZE}M" --ioengine=psync
    phase "$kind" randread read iops --rw=randread --bs=4k --size="${SIZE}M" --ioengine=psync \
        --time_based --runtime="$SECONDS_" --randrepeat=0
    phase "$kind" randwrite write iops --rw=randwrite --bs=4k --size="${SIZE}M" --ioengine=psync \
        --io_size="$(( SIZE / 8 ))M" --end_fsync=1 --randrepeat=0
    timeout 120 umount "$MNT" || exit 1
    # umount returns before the server has closed the volume.
    for _ in $(seq 600); do
        pgrep -xf "$TUX3 mount $LOOP $MNT" >/dev/null || break
        sleep 0.1
    done
}

echo "kind phase rate cpu_s read_ios read_blocks write_ios write_blocks"
for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then one sums; one none; else one none; one sums; fi
done

python3 - "$RESULTS" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
for kind in ("sums", "none"):
    for ph in ("seqwrite", "seqread", "randread", "randwrite"):
        sel = [r for r in rows if r[0] == kind and r[1] == ph]
        med[kind, ph] = [statistics.median(float(r[i]) for r in sel) for i in range(2, 8)]
        rates = " / ".join(r[2] for r in sel)
        print(f"{kind:4} {ph:9} rates {rates}")
print("phase     unit  sums(median) none(median) ratio  cpu_s sums/none  dev sums: rd ios/blocks wr ios/blocks | none")
for ph, unit in (("seqwrite", "MB/s"), ("seqread", "MB/s"), ("randread", "IOPS"), ("randwrite", "IOPS")):
    s, n = med["sums", ph], med["none", ph]
    print(f"{ph:9} {unit:5} {s[0]:11.1f} {n[0]:11.1f} {s[0] / n[0]:6.3f}  {s[1]:.2f}/{n[1]:.2f}"
          f"  {s[2]:.0f}/{s[3]:.0f} {s[4]:.0f}/{s[5]:.0f} | {n[2]:.0f}/{n[3]:.0f} {n[4]:.0f}/{n[5]:.0f}")
EOF
