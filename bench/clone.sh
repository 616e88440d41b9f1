#!/bin/bash
# bench/clone.sh: what cp (coreutils, which calls copy_file_range(2), a
# clone on tux3: Fs::clone_range) costs through the mount, in time and in
# device writes.
#   1. an image of SIZE + 4 GiB (IMG_MIB overrides), allocated in full on
#      the host, on a loop device with direct I/O (so /sys/block/loopN/stat
#      counts what tux3 writes), made a volume and mounted. A clone takes
#      no space of its own, so a cp that copied would run out of space:
#      give IMG_MIB=$((2 * SIZE + 2048)) to measure a copying build;
#   2. `src`: SIZE MiB of random bytes written through the mount, the
#      volume committed (`tux3 sync`), its sha256 taken;
#   3. RUNS times: `cp src copy` timed, then `tux3 sync` timed, with the
#      loop device's sectors written and the volume's free blocks (statfs)
#      before and after; the copy deleted and committed between runs. The
#      median of each figure;
#   4. a last copy, then random overwrites (unaligned, 4 KiB to 1 MiB,
#      none overlapping within a file, different ones in each file) of
#      both files, committed; the sha256 each should have is computed
#      beforehand from one read of the shared content; after a remount
#      (cold) both are hashed and compared.
# Prints one line per run and the medians. Unmounts and detaches on every
# path. Root only.
#
# Usage: bench/clone.sh [SIZE_MIB] [RUNS] [SCRATCH]   (10240, 3, /var/tmp)
# CLONE_MIB overrides SIZE_MIB; OVERWRITES (default 1000) sets the
# overwrites per file; MKFS_OPTS adds options to mkfs (e.g.
# --no-data-sums). The tux3 binary: $TUX3, else
# $CARGO_TARGET_DIR/release/tux3, else target/release/tux3.
set -u
MIB=${CLONE_MIB:-${1:-10240}}
RUNS=${2:-3}
SCRATCH=${3:-/var/tmp}
OVERWRITES=${OVERWRITES:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tux3}
[ "$(id -u)" = 0 ] || { echo "clone bench: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "clone bench: no $TUX3 (cargo build --release, or set TUX3)" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/clone-bench.XXXXXX")
MNT=$DIR/mnt
LOOP=
cleanup() {
    if findmnt "$MNT" >/dev/null 2>&1; then
        timeout 600 "$TUX3" umount "$MNT" || umount -l "$MNT"
    fi
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
die() { echo "clone bench: $*" >&2; exit 1; }

IMG=$DIR/img
fallocate -l "${IMG_MIB:-$((MIB + 4096))}M" "$IMG" || die "fallocate"
LOOP=$(losetup --direct-io=on -f --show "$IMG") || die "losetup"
STAT=/sys/block/$(basename "$LOOP")/stat
mkdir "$MNT"
# shellcheck disable=SC2086 # MKFS_OPTS is a list of options
timeout 600 "$TUX3" mkfs -q ${MKFS_OPTS:-} "$LOOP" >/dev/null || die "mkfs"
timeout 60 "$TUX3" mount "$LOOP" "$MNT" || die "mount"

now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc -l; }
written() { awk '{print $7}' "$STAT"; }  # 512-byte sectors written
free_blocks() { stat -f -c %f "$MNT"; }
BS=$(stat -f -c %S "$MNT")

T0=$(now)
timeout 3600 dd if=/dev/urandom of="$MNT/src" bs=1M count="$MIB" status=none || die "writing src"
timeout 3600 "$TUX3" sync "$MNT" || die "sync"
T1=$(now)
printf 'src: %d MiB written and committed in %.1f s\n' "$MIB" "$(secs "$T0" "$T1")"
SUM=$(timeout 3600 sha256sum "$MNT/src" | cut -d' ' -f1) || die "sha256sum"

CP=() SYNC=() MIBW=() FREED=()
for run in $(seq 1 "$RUNS"); do
    f0=$(free_blocks)
    w0=$(written)
    t0=$(now)
    timeout 3600 cp "$MNT/src" "$MNT/copy" || die "cp"
    t1=$(now)
    timeout 3600 "$TUX3" sync "$MNT" || die "sync"
    t2=$(now)
    w1=$(written)
    f1=$(free_blocks)
    CP+=("$(secs "$t0" "$t1")")
    SYNC+=("$(secs "$t1" "$t2")")
    MIBW+=("$(echo "($w1 - $w0) * 512 / 1048576" | bc -l)")
    FREED+=("$(echo "($f0 - $f1) * $BS / 1048576" | bc -l)")
    printf 'run %d: cp %.3f s, sync %.3f s; device written %.1f MiB; free space taken %.1f MiB\n' \
        "$run" "${CP[-1]}" "${SYNC[-1]}" "${MIBW[-1]}" "${FREED[-1]}"
    if [ "$run" -lt "$RUNS" ]; then
        rm "$MNT/copy" || die "rm"
        timeout 3600 "$TUX3" sync "$MNT" || die "sync"
    fi
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
printf 'median of %d: cp %.3f s (%.0f MiB/s), sync after it %.3f s, device written %.1f MiB, free space taken %.1f MiB (file %d MiB)\n' \
    "$RUNS" "$(median "${CP[@]}")" "$(echo "$MIB / $(median "${CP[@]}")" | bc -l)" \
    "$(median "${SYNC[@]}")" "$(median "${MIBW[@]}")" "$(median "${FREED[@]}")" "$MIB"

# The copy is the last run's. The sums both files should have once
# overwritten, from one read of their shared content; then the overwrites.
EXPECT=$(timeout 3600 python3 - "$MNT/copy" "$OVERWRITES" <<'PY'
import hashlib, random, sys
path, n = sys.argv[1], int(sys.argv[2])
size = __import__("os").path.getsize(path)
def patches(seed):
    r = random.Random(seed)
    out, taken = [], []
    for _ in range(n):
        length = r.randint(4096, 1 << 20)
        off = r.randrange(0, max(1, size - length))
        out.append((off, length, seed))
    out.sort()
    kept, end = [], 0
    for off, length, s in out:
        if off >= end:
            kept.append((off, length))
            end = off + length
    return kept
def data(seed, off, length):
    return random.Random(seed * 1_000_003 + off).randbytes(length)
sets = {name: patches(seed) for name, seed in (("src", 1), ("copy", 2))}
hashes = {name: hashlib.sha256() for name in sets}
CHUNK = 8 << 20
with open(path, "rb") as f:
    pos = 0
    idx = {name: 0 for name in sets}
    while True:
        buf = f.read(CHUNK)
        if not buf:
            break
        for name, ps in sets.items():
            b = bytearray(buf)
            i = idx[name]
            while i > 0 and ps[i - 1][0] + ps[i - 1][1] > pos:
                i -= 1
            seed = 1 if name == "src" else 2
            while i < len(ps) and ps[i][0] < pos + len(buf):
                off, length = ps[i]
                lo, hi = max(off, pos), min(off + length, pos + len(buf))
                if lo < hi:
                    b[lo - pos:hi - pos] = data(seed, off, length)[lo - off:hi - off]
                if off + length > pos + len(buf):
                    break
                i += 1
            idx[name] = i
            hashes[name].update(b)
        pos += len(buf)
import json
with open(sys.argv[1] + ".patches.json", "w") as out:
    json.dump(sets, out)
print(hashes["src"].hexdigest(), hashes["copy"].hexdigest())
PY
) || die "computing the expected sums"
mv "$MNT/copy.patches.json" "$DIR/patches.json" || die "mv"
timeout 3600 python3 - "$MNT" "$DIR/patches.json" <<'PY' || die "overwrites"
import json, os, random, sys
mnt, sets = sys.argv[1], json.load(open(sys.argv[2]))
for name, seed in (("src", 1), ("copy", 2)):
    fd = os.open(os.path.join(mnt, name), os.O_WRONLY)
    for off, length in sets[name]:
        os.pwrite(fd, random.Random(seed * 1_000_003 + off).randbytes(length), off)
    os.close(fd)
PY
timeout 3600 "$TUX3" sync "$MNT" || die "sync"
timeout 600 "$TUX3" umount "$MNT" || die "umount"
sync
echo 3 >/proc/sys/vm/drop_caches
timeout 60 "$TUX3" mount "$LOOP" "$MNT" || die "mount"
read -r WANT_SRC WANT_COPY <<<"$EXPECT"
GOT_SRC=$(timeout 3600 sha256sum "$MNT/src" | cut -d' ' -f1)
GOT_COPY=$(timeout 3600 sha256sum "$MNT/copy" | cut -d' ' -f1)
[ "$GOT_SRC" = "$WANT_SRC" ] || die "src after overwrites: $GOT_SRC, want $WANT_SRC"
[ "$GOT_COPY" = "$WANT_COPY" ] || die "copy after overwrites: $GOT_COPY, want $WANT_COPY"
[ "$GOT_SRC" != "$SUM" ] && [ "$GOT_COPY" != "$SUM" ] || die "an overwrite did not change a file"
echo "overwrites: $OVERWRITES tried per file; both files hold exactly their own (sha256 match after a remount)"
timeout 600 "$TUX3" umount "$MNT" || die "umount"
timeout 3600 "$TUX3" fsck "$LOOP" >/dev/null || die "fsck found problems"
echo "fsck: clean"
