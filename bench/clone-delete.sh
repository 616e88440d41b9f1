#!/bin/bash
# bench/clone-delete.sh: deleting a great many clones of one file, at the
# engine level (bench/engine's `clonedel` load: the tux3 library on a loop
# device, no FUSE). One source file of SRC_KIB KiB, FILES clones of it in
# DIRS directories (Fs::clone_range), committed; then an idle baseline of
# another thread's write+fsync loop, then every clone deleted with that
# loop running beside the deletes. A commit thread calls Fs::sync every
# COMMIT_MS and times each. Prints the load's JSON lines (see
# bench/engine/src/clonedel.rs) and the loop device's sectors written.
#
# The volume: a sparse image of IMG_GIB GiB on SCRATCH (FULL_IMAGE set:
# an image written in full first, so that no write of the load allocates
# in SCRATCH's filesystem), on a loop device with direct I/O. Detached
# and removed on every path. Root only.
#
# Usage: bench/clone-delete.sh [FILES] [DIRS] [COMMIT_MS] [SCRATCH]
#        (1000000, 1000, 1000, /var/tmp)
# SRC_KIB (64), GAP_MS (10: the fsync loop's pause), IDLE_S (20),
# IMG_GIB (16), VOLUME_COMMIT_MS (unset: the volume has no commit thread
# of its own; set: it has one, as a mount does, ending a delta every that
# many ms and early under dirty-data pressure). The binary: $BENCH, else
# $CARGO_TARGET_DIR/release/tux3-bench-engine (cargo build --release in
# bench/engine).
set -u
FILES=${1:-1000000}
DIRS=${2:-1000}
COMMIT_MS=${3:-1000}
SCRATCH=${4:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=${BENCH:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tux3-bench-engine}
[ "$(id -u)" = 0 ] || { echo "clone-delete: run as root" >&2; exit 2; }
[ -x "$BENCH" ] || { echo "clone-delete: no $BENCH" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/clone-delete.XXXXXX")
LOOP=
cleanup() {
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
die() { echo "clone-delete: $*" >&2; exit 1; }

if [ -n "${FULL_IMAGE:-}" ]; then
    # Every block of the image written first: no write of the load
    # allocates in the scratch filesystem (whose journal commit an fsync
    # through a sparse image would otherwise wait for).
    dd if=/dev/zero of="$DIR/img" bs=16M count=$(( ${IMG_GIB:-16} * 64 )) oflag=direct status=none || die "writing the image"
else
    truncate -s "${IMG_GIB:-16}G" "$DIR/img" || die "truncate"
fi
LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || die "losetup"
STAT=/sys/block/$(basename "$LOOP")/stat
w0=$(awk '{print $7}' "$STAT")
r0=$(awk '{print $3}' "$STAT")
timeout 7200 "$BENCH" clonedel --engine "$LOOP" --files "$FILES" --dirs "$DIRS" \
    --commit-ms "$COMMIT_MS" --src-kib "${SRC_KIB:-64}" --gap-ms "${GAP_MS:-10}" \
    --idle-s "${IDLE_S:-20}" ${VOLUME_COMMIT_MS:+--volume-commit-ms "$VOLUME_COMMIT_MS"} || die "the load failed"
w1=$(awk '{print $7}' "$STAT")
r1=$(awk '{print $3}' "$STAT")
echo "loop device: $(( (w1 - w0) / 2048 )) MiB written, $(( (r1 - r0) / 2048 )) MiB read in all; image $(du -h "$DIR/img" | cut -f1) allocated"
