#!/bin/bash
# bench/dedupe.sh: what `tux3 dedupe` gives back and how fast it reads.
#   1. a tux3 volume on a loop device (direct I/O) over an image written in
#      full, mounted; SOURCE (default /usr/include) copied into it twice
#      with cp -a; `tux3 sync`; the used space (df on the mount) recorded
#      empty, after one copy and after two; unmounted;
#   2. the device's sequential read bandwidth: dd iflag=direct bs=4M of as
#      many MiB as the volume uses, from the loop device;
#   3. `tux3 dedupe -v DEVICE` on the unmounted volume, caches dropped,
#      timed: its summary (bytes read, read rate, duplicate and shared
#      bytes), then mounted again: the used space now, and both copies
#      compared with SOURCE (diff -r);
#   4. the same on a fresh volume with the same two copies, through the
#      mount (`tux3 dedupe -v MOUNT`: the server does the work).
# Target: the used space after dedupe that of one copy, and the read rate
# at least half the device's. Prints one line per figure. Everything is
# undone on every exit path (space-lib.sh's traps: it detaches only the
# loop device and ends only the server it started). Root.
#
# Usage: bench/dedupe.sh [SOURCE] [SCRATCH] [IMAGE_MIB]
#        (SOURCE = /usr/include, SCRATCH = /var/tmp, IMAGE_MIB = 1024)
# TUX3 may name the tux3 binary (default $CARGO_TARGET_DIR/release/tux3,
# else target/release/tux3).
set -u
SOURCE=${1:-/usr/include}
SCRATCH=${2:-/var/tmp}
MIB=${3:-1024}
. "$(dirname "$0")/space-lib.sh"
space_need_root "dedupe bench"
[ -d "$SOURCE" ] || { echo "dedupe bench: no $SOURCE" >&2; exit 2; }
space_init dedupe-bench "$SCRATCH"
IMG=$SPACE_DIR/img

used_mib() { df -B1M --output=used "$SPACE_MNT" | tail -1 | tr -d ' '; }

# A fresh volume with two copies of SOURCE, unmounted at the end; the used
# space (MiB) empty, with one copy and with two in USED0, USED1, USED2.
fill() {
    space_unmount
    space_detach
    space_image "$IMG" "$MIB"
    space_attach "$IMG"
    space_mkfs tux3
    space_mount tux3
    space_sync
    USED0=$(used_mib)
    timeout 1800 cp -a "$SOURCE" "$SPACE_MNT/copy1" || die "cp copy1"
    space_sync
    USED1=$(used_mib)
    timeout 1800 cp -a "$SOURCE" "$SPACE_MNT/copy2" || die "cp copy2"
    space_sync
    USED2=$(used_mib)
    say "used: empty $USED0 MiB, one copy $USED1 MiB, two copies $USED2 MiB"
}

# Mount, record the used space, compare both copies with SOURCE, fsck.
check() {
    space_mount tux3
    USED_AFTER=$(used_mib)
    for c in copy1 copy2; do
        timeout 1800 diff -r --no-dereference "$SOURCE" "$SPACE_MNT/$c" >/dev/null \
            || die "$c differs from $SOURCE after dedupe"
    done
    space_unmount
    timeout 1800 "$TUX3" fsck "$SPACE_DEV" >/dev/null || die "fsck after dedupe"
    echo "$1: used after dedupe $USED_AFTER MiB (one copy $USED1, two $USED2: $((USED2 - USED_AFTER)) of $((USED2 - USED1)) MiB came back); both copies as $SOURCE; fsck clean"
}

# "R MiB/s" of a summary line.
rate_of() { sed -n 's/.* MiB read in [0-9.]* s (\([0-9.]*\) MiB\/s).*/\1/p' <<<"$1"; }

echo "source: $SOURCE, $(du -sm "$SOURCE" | cut -f1) MiB, $(find "$SOURCE" -type f | wc -l) files"
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1); scratch $(df --output=source "$SCRATCH" | tail -1) ($(findmnt -no FSTYPE -T "$SCRATCH"))"

fill
space_unmount
drop_caches
DD_MIB=$(((USED2 + 3) / 4 * 4))
DD=$(timeout 600 dd if="$SPACE_DEV" of=/dev/null iflag=direct bs=4M count=$((DD_MIB / 4)) 2>&1 | tail -1)
DEV_RATE=$(python3 -c "import re,sys; m=re.search(r'copied, ([0-9.]+) s', sys.argv[1]); print('%.1f' % ($DD_MIB / float(m.group(1))))" "$DD")
echo "device: sequential read (dd iflag=direct bs=4M, $DD_MIB MiB) $DEV_RATE MiB/s"

# The same dedupe, changing nothing: how long finding takes alone.
drop_caches
OUT=$(timeout 3600 "$TUX3" dedupe -n "$SPACE_DEV") || die "tux3 dedupe -n failed"
echo "image, dry run: $(tail -1 <<<"$OUT")"

drop_caches
T0=$(now)
OUT=$(timeout 3600 "$TUX3" dedupe -v "$SPACE_DEV") || { echo "$OUT" | tail -5; die "tux3 dedupe on the image failed"; }
T1=$(now)
SUM=$(tail -1 <<<"$OUT")
echo "image: tux3 dedupe -v $SPACE_DEV: $(elapsed "$T0" "$T1") s wall; $(grep -c ' = ' <<<"$OUT") pairs; $SUM"
R=$(rate_of "$SUM")
echo "image: read rate $R MiB/s = $(python3 -c "print('%.0f' % (100 * $R / $DEV_RATE))")% of the device's"
check image

fill
space_unmount
drop_caches
space_mount tux3
T0=$(now)
OUT=$(timeout 3600 "$TUX3" dedupe -v "$SPACE_MNT") || { echo "$OUT" | tail -5; die "tux3 dedupe through the mount failed"; }
T1=$(now)
SUM=$(tail -1 <<<"$OUT")
echo "mount: tux3 dedupe -v MOUNT: $(elapsed "$T0" "$T1") s wall; $(grep -c ' = ' <<<"$OUT") pairs; $SUM"
R=$(rate_of "$SUM")
echo "mount: read rate $R MiB/s = $(python3 -c "print('%.0f' % (100 * $R / $DEV_RATE))")% of the device's"
space_unmount
check mount
