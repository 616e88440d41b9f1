#!/bin/bash
# bench/scrub.sh: how fast `tux3 scrub` reads against the device, and what
# a scrub at the default rate does to another process's small fsyncs.
#   1. an image of SIZE written in full (so no read finds a hole), made a
#      volume and filled through a mount with 80% of SIZE in 256 MiB files;
#   2. the device alone: dd of the whole image with O_DIRECT, page cache
#      dropped first (sequential read bandwidth);
#   3. `tux3 scrub start --rate max` on the unmounted image, page cache
#      dropped first: bytes checked / wall time;
#   4. mounted: a loop of 1,000 4 KiB writes each followed by fsync, idle,
#      then again while `tux3 scrub` runs at its default rate; p50/p99.
# Prints one line per figure and the ratios. Unmounts on every path. Root.
#
# Usage: bench/scrub.sh [SIZE_GIB] [SCRATCH]   (SIZE_GIB = 3, SCRATCH = /var/tmp)
# TUX3 may name the tux3 binary (default target/release/tux3).
set -u
GIB=${1:-3}
SCRATCH=${2:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-$ROOT/target/release/tux3}
[ "$(id -u)" = 0 ] || { echo "scrub bench: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "scrub bench: no $TUX3 (cargo build --release, or set TUX3)" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/scrub-bench.XXXXXX")
cleanup() {
    findmnt "$DIR/mnt" >/dev/null 2>&1 && { "$TUX3" umount "$DIR/mnt" || umount -l "$DIR/mnt"; }
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir "$DIR/mnt"
IMG=$DIR/img

dd if=/dev/zero of="$IMG" bs=64M count=$((GIB * 16)) oflag=direct status=none || exit 1
"$TUX3" mkfs "$IMG" >/dev/null || exit 1
"$TUX3" mount "$IMG" "$DIR/mnt" || exit 1
FILES=$((GIB * 4 * 4 / 5))
for i in $(seq 1 $FILES); do
    dd if=/dev/urandom of="$DIR/mnt/f$i" bs=1M count=256 status=none || exit 1
done
"$TUX3" umount "$DIR/mnt" || exit 1

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }

drop
T0=$(now)
dd if="$IMG" of=/dev/null bs=4M iflag=direct status=none || exit 1
T1=$(now)
DEV=$(echo "$GIB * 1024 / ($T1 - $T0)" | bc -l)
printf 'device: dd of %d GiB, O_DIRECT, bs=4M: %.0f MiB/s\n' "$GIB" "$DEV"

drop
T0=$(now)
"$TUX3" scrub start --restart --rate max "$IMG" || exit 1
T1=$(now)
CHECKED=$("$TUX3" dump "$IMG" | sed -n 's/.* \([0-9]*\) of \([0-9]*\) bytes checked.*/\2/p')
SCRUB=$(echo "$CHECKED / 1048576 / ($T1 - $T0)" | bc -l)
printf 'scrub --rate max: %.0f MiB checked in %.2f s: %.0f MiB/s, %.0f%% of the device\n' \
    "$(echo "$CHECKED / 1048576" | bc -l)" "$(echo "$T1 - $T0" | bc -l)" "$SCRUB" "$(echo "100 * $SCRUB / $DEV" | bc -l)"

"$TUX3" mount "$IMG" "$DIR/mnt" || exit 1
fsyncs() {
    python3 - "$DIR/mnt/fsync-$1" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = b"x" * 4096
lat = []
for i in range(1000):
    t = time.perf_counter()
    os.pwrite(fd, buf, (i % 64) * 4096)
    os.fsync(fd)
    lat.append(time.perf_counter() - t)
lat.sort()
print("%.3f %.3f" % (lat[len(lat) // 2] * 1e3, lat[len(lat) * 99 // 100] * 1e3))
PY
}
read -r P50I P99I < <(fsyncs idle)
"$TUX3" scrub start --restart "$DIR/mnt" || exit 1
read -r P50S P99S < <(fsyncs scrub)
RUNNING=$("$TUX3" scrub status "$DIR/mnt" | head -1)
"$TUX3" scrub cancel "$DIR/mnt" >/dev/null 2>&1
printf 'fsync of 4 KiB, 1000 in a row: idle p50 %.3f ms p99 %.3f ms; during scrub at the default rate p50 %.3f ms p99 %.3f ms; p99 ratio %.2f\n' \
    "$P50I" "$P99I" "$P50S" "$P99S" "$(echo "$P99S / $P99I" | bc -l)"
echo "status while the loop ran: $RUNNING"
