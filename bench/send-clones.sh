#!/bin/bash
# bench/send-clones.sh: what a send stream of a volume full of clones
# costs, and what the receive makes of it (target: a clone is sent as a
# reference, not as data, and arrives shared — stream size / one copy and
# received space / one copy both at most 1.01).
#   1. a sparse image, `tux3 mkfs`; `clone-files make` (an example binary
#      of crates/tools, until `tux3 clone` exists) writes /orig, SIZE_MIB
#      MiB no two blocks of which are alike, and CLONES files /c0.. made
#      with Fs::clone_range of all of it, and takes snapshot s1;
#   2. `tux3 send IMG s1 > stream` (timed);
#   3. a second sparse image, `tux3 mkfs`, `tux3 receive IMG2 < stream`
#      (timed);
#   4. the stream's bytes, and the space the source and the receiver use
#      (`clone-files used`: statfs blocks in use, after less before), each
#      over SIZE_MIB MiB; then the received snapshot is sent again: the
#      same length means the same records (the same data, shared alike);
#   5. every file of s1 on both read and summed (`clone-files sums`:
#      size and CRC32C), the lists compared.
# Prints one line per figure. No root, no mount: images only.
#
# Usage: bench/send-clones.sh [SIZE_MIB] [CLONES] [SCRATCH]
#        (SIZE_MIB = 100, CLONES = 1000, SCRATCH = /var/tmp)
# MKFS_OPTS adds options to both mkfs (e.g. --no-data-sums).
# TUX3 may name the tux3 binary (default $CARGO_TARGET_DIR/release/tux3,
# else target/release/tux3), CLONE_FILES the example (default
# .../release/examples/clone-files; build both with
# `cargo build --release -p tux3-cli && cargo build --release -p tux3-tools --example clone-files`).
set -u
MIB=${1:-100}
CLONES=${2:-1000}
SCRATCH=${3:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${CARGO_TARGET_DIR:-$ROOT/target}/release
TUX3=${TUX3:-$OUT/tux3}
CLONE_FILES=${CLONE_FILES:-$OUT/examples/clone-files}
[ -x "$TUX3" ] || { echo "send-clones bench: no $TUX3 (cargo build --release -p tux3-cli, or set TUX3)" >&2; exit 2; }
[ -x "$CLONE_FILES" ] || { echo "send-clones bench: no $CLONE_FILES (cargo build --release -p tux3-tools --example clone-files, or set CLONE_FILES)" >&2; exit 2; }

mkdir -p "$SCRATCH"
DIR=$(mktemp -d "$SCRATCH/send-clones.XXXXXX") || exit 1
trap 'rm -rf "$DIR"' EXIT
trap 'exit 1' INT TERM
now() { date +%s.%N; }
ratio() { python3 -c "print('%.4f' % ($1 / $2))"; }
secs() { python3 -c "print('%.2f' % ($2 - $1))"; }
used() { "$CLONE_FILES" used "$1" | awk '{print $2}'; }

# Sparse images big enough for every clone as a copy (what a clone_range
# that copies makes) plus a quarter and 256 MiB: only what is written
# takes the host's space.
IMG_MIB=$(( MIB * (CLONES + 1) * 5 / 4 + 256 ))
SRC=$DIR/src.img
DST=$DIR/dst.img
truncate -s "${IMG_MIB}M" "$SRC" "$DST" || exit 1
# MKFS_OPTS: more options of `tux3 mkfs` for both volumes, such as
# --no-data-sums (each extent entry then carries no checksum per block).
"$TUX3" mkfs ${MKFS_OPTS:-} "$SRC" >/dev/null || exit 1
"$TUX3" mkfs ${MKFS_OPTS:-} "$DST" >/dev/null || exit 1
ONE=$(( MIB << 20 ))
SRC0=$(used "$SRC")
DST0=$(used "$DST")

T0=$(now)
"$CLONE_FILES" make "$SRC" "$MIB" "$CLONES" s1 || exit 1
T1=$(now)
SRCUSED=$(( $(used "$SRC") - SRC0 ))
echo "source: /orig of $MIB MiB and $CLONES clones made in $(secs "$T0" "$T1") s; space used / one copy: $(ratio "$SRCUSED" "$ONE")"

T0=$(now)
"$TUX3" send "$SRC" s1 > "$DIR/stream" || exit 1
T1=$(now)
STREAM=$(stat -c %s "$DIR/stream")
echo "send: $STREAM bytes in $(secs "$T0" "$T1") s; stream / one copy: $(ratio "$STREAM" "$ONE")"

T0=$(now)
"$TUX3" receive "$DST" < "$DIR/stream" || exit 1
T1=$(now)
DSTUSED=$(( $(used "$DST") - DST0 ))
echo "receive: in $(secs "$T0" "$T1") s; received space used / one copy: $(ratio "$DSTUSED" "$ONE")"

# The received snapshot sent again is the same stream but for Begin's
# identity: the same records, so the same length, if every file arrived
# with the same data at the same sharing.
"$TUX3" send "$DST" s1 > "$DIR/stream2" || exit 1
STREAM2=$(stat -c %s "$DIR/stream2")
if [ "$STREAM2" = "$STREAM" ]; then same=yes; else same="no ($STREAM2 bytes)"; fi
echo "the received snapshot sent again gives a stream of the same length: $same"
"$CLONE_FILES" sums "$SRC" s1 > "$DIR/sums.src" || exit 1
"$CLONE_FILES" sums "$DST" s1 > "$DIR/sums.dst" || exit 1
if cmp -s "$DIR/sums.src" "$DIR/sums.dst"; then
    echo "contents: the $(wc -l < "$DIR/sums.src") files of s1 read back the same (size and CRC32C)"
else
    echo "contents: DIFFER"; diff "$DIR/sums.src" "$DIR/sums.dst" | head; exit 1
fi
echo "summary: size_mib=$MIB clones=$CLONES stream_ratio=$(ratio "$STREAM" "$ONE") received_ratio=$(ratio "$DSTUSED" "$ONE") source_ratio=$(ratio "$SRCUSED" "$ONE")"
