#!/bin/bash
# bench/defrag.sh: what `tux3 defrag` does to a file written in random
# 4 KiB order (issue 50's target: at most 16 extents, and a cold read at
# least 0.9x that of a freshly written copy).
#   1. an image of 5x SIZE, allocated in full on the host, made a volume
#      and mounted;
#   2. `frag`: SIZE written 4 KiB at a time in random order through the
#      mount, the volume committed (`tux3 sync`'s ioctl) every 256 writes,
#      as a random writer that syncs often does (a commit allocates its
#      dirty pages in logical order, so without commits the blocks would
#      land in order anyway);
#   3. `fresh`: a copy of it written sequentially (dd bs=1M: cp would
#      clone it through copy_file_range, sharing frag's blocks);
#   4. cold reads (unmount, drop caches, mount: dd bs=1M) of both;
#   5. `tux3 defrag -v frag` (timed), `fresh2`: a copy written after it,
#      then cold reads of the three, in turn, ROUNDS rounds: the best of
#      each, and the median of each round's ratios (the reads of one round
#      are seconds apart, so they share the machine's mood).
# Prints one line per figure and the ratio. Unmounts on every path. Root.
#
# Usage: bench/defrag.sh [SIZE_MIB] [SCRATCH] [ROUNDS]
#        (SIZE_MIB = 1024, SCRATCH = /var/tmp, ROUNDS = 3)
# TUX3 may name the tux3 binary (default target/release/tux3).
set -u
MIB=${1:-1024}
SCRATCH=${2:-/var/tmp}
ROUNDS=${3:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-$ROOT/target/release/tux3}
[ "$(id -u)" = 0 ] || { echo "defrag bench: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "defrag bench: no $TUX3 (cargo build --release, or set TUX3)" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/defrag-bench.XXXXXX")
MNT=$DIR/mnt
cleanup() {
    findmnt "$MNT" >/dev/null 2>&1 && { "$TUX3" umount "$MNT" || umount -l "$MNT"; }
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir "$MNT"
IMG=$DIR/img

# Allocated in full on the host (not sparse): the host filesystem places
# the image's blocks once, so what is measured is tux3's layout, not the
# order in which the host allocated the blocks of a sparse file.
fallocate -l "$((MIB * 5))M" "$IMG" || exit 1
"$TUX3" mkfs "$IMG" >/dev/null || exit 1
echo "image: $(filefrag "$IMG" | sed 's/.*: //') on the host"
"$TUX3" mount "$IMG" "$MNT" || exit 1

now() { date +%s.%N; }
T0=$(now)
python3 - "$MNT/frag" "$MIB" <<'PY' || exit 1
import fcntl, os, random, sys
path, mib = sys.argv[1], int(sys.argv[2])
blocks = mib * 256
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
order = list(range(blocks))
random.Random(50).shuffle(order)
IOC_SYNC = 0xE301
for k, b in enumerate(order):
    os.pwrite(fd, b.to_bytes(8, "little") * 512, b * 4096)
    if k % 256 == 255:
        fcntl.ioctl(fd, IOC_SYNC)
os.close(fd)
PY
T1=$(now)
printf 'frag: %d MiB written in random 4 KiB order in %.1f s\n' "$MIB" "$(echo "$T1 - $T0" | bc -l)"
copy() { dd if="$MNT/$1" of="$MNT/$2" bs=1M status=none; }
copy frag fresh || exit 1
"$TUX3" sync "$MNT" || exit 1

cold() {
    "$TUX3" umount "$MNT" || exit 1
    sync
    echo 3 >/proc/sys/vm/drop_caches
    "$TUX3" mount "$IMG" "$MNT" || exit 1
    local t0 t1
    t0=$(now)
    dd if="$MNT/$1" of=/dev/null bs=1M status=none || exit 1
    t1=$(now)
    echo "$MIB / ($t1 - $t0)" | bc -l
}
extents() {
    # "PATH: N extents, ..." from a dry run (nothing changes).
    "$TUX3" defrag -n "$MNT/$1" | sed -n 's/^[^:]*: \([0-9]*\) extents.*/\1/p' | head -1
}

FRESH_EXT=$(extents fresh)
FRAG_EXT=$(extents frag)
echo "extents: frag $FRAG_EXT, fresh $FRESH_EXT"
FRAG_BEFORE=$(cold frag)
FRESH_BEFORE=$(cold fresh)
printf 'before: frag cold read %.1f MiB/s; fresh (%s extents) %.1f MiB/s\n' "$FRAG_BEFORE" "$FRESH_EXT" "$FRESH_BEFORE"

T0=$(now)
OUT=$("$TUX3" defrag -v "$MNT/frag") || { echo "$OUT"; exit 1; }
T1=$(now)
echo "$OUT" | head -1
printf 'defrag: %.1f s (%.1f MiB/s)\n' "$(echo "$T1 - $T0" | bc -l)" "$(echo "$MIB / ($T1 - $T0)" | bc -l)"
cmp "$MNT/frag" "$MNT/fresh" || { echo "defrag bench: contents differ" >&2; exit 1; }

# A second fresh copy, written after the defrag: where new data goes now.
copy frag fresh2 || exit 1
"$TUX3" sync "$MNT" || exit 1
echo "extents: fresh2 $(extents fresh2)"
# ROUNDS cold reads of each, in turn; the best of each (the machine is
# shared: a busy moment only slows a read down) and the median of the
# rounds' ratios.
best() { printf '%s\n' "$@" | sort -g | tail -1; }
FA=() FR=() F2=()
for round in $(seq "$ROUNDS"); do
    FA+=("$(cold frag)")
    FR+=("$(cold fresh)")
    F2+=("$(cold fresh2)")
    printf 'after, round %d: frag %.1f MiB/s, fresh %.1f MiB/s, fresh2 %.1f MiB/s\n' \
        "$round" "${FA[-1]}" "${FR[-1]}" "${F2[-1]}"
done
FRAG_AFTER=$(best "${FA[@]}")
FRESH_AFTER=$(best "${FR[@]}")
FRESH2=$(best "${F2[@]}")
printf 'after, best of %d: frag %.1f MiB/s; fresh %.1f MiB/s; fresh2 %.1f MiB/s\n' \
    "$ROUNDS" "$FRAG_AFTER" "$FRESH_AFTER" "$FRESH2"
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
R1=() R2=()
for i in "${!FA[@]}"; do
    R1+=("$(echo "${FA[$i]} / ${FR[$i]}" | bc -l)")
    R2+=("$(echo "${FA[$i]} / ${F2[$i]}" | bc -l)")
done
printf 'median of the rounds'"'"' ratios: frag/fresh %.2f, frag/fresh2 %.2f\n' "$(median "${R1[@]}")" "$(median "${R2[@]}")"
printf 'ratio frag/fresh %.2f, frag/fresh2 %.2f\n' "$(echo "$FRAG_AFTER / $FRESH_AFTER" | bc -l)" \
    "$(echo "$FRAG_AFTER / $FRESH2" | bc -l)"
"$TUX3" umount "$MNT" || exit 1
"$TUX3" fsck "$IMG" >/dev/null || { echo "defrag bench: fsck found problems" >&2; exit 1; }
echo "fsck: clean"
