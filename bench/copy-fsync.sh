#!/bin/bash
# bench/copy-fsync.sh: what the device alone does to another process's
# fsync while data moves — the reference for the shrink's latency target
# (bench/shrink.sh). Per round, on a loop device (direct I/O) over a fresh
# sparse image of 8 GiB in SCRATCH, mounted with `tux3 mount`:
#   1. one 3 GiB file written through the mount and synced;
#   2. idle: a separate process writes 4 KiB at offset 0 of its own file
#      on the mount and fsyncs, 1,000 times: p50 and p99;
#   3. a raw copy (no filesystem work) of 3 GiB of the loop device (the
#      file's blocks) to a file beside the image on the same disk, in
#      direct reads and writes of BS, with an fdatasync of the copy every
#      FLUSH_MIB (0: none, as `dd oflag=direct` does; a mover that must
#      survive a crash flushes, as the shrink does every 32 MiB batch),
#      with the same fsync loop running until it ends: the copy's MiB/s,
#      and the fsync p50 and p99 beside it.
# Prints one line per round and the medians. Unmounts, detaches and
# deletes on every path. Root only.
#
# Usage: bench/copy-fsync.sh [ROUNDS] [BS] [FLUSH_MIB] [SCRATCH]
#        (defaults 3, 1M, 32, /var/tmp)
set -u
ROUNDS=${1:-3}
BS=${2:-1M}
FLUSH_MIB=${3:-32}
SCRATCH=${4:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-$ROOT/target/release/tux3}
[ "$(id -u)" = 0 ] || { echo "copy-fsync: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "copy-fsync: build the cli first (cargo build --release -p tux3-cli)" >&2; exit 2; }
BS_MIB=$(( $(numfmt --from=iec "$BS") >> 20 ))
[ "$BS_MIB" -ge 1 ] || { echo "copy-fsync: BS must be at least 1M" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/copy-fsync.XXXXXX")
LOOP=
MNT=$DIR/mnt
mkdir "$MNT"
cleanup() {
    [ -f "$DIR/stop" ] || touch "$DIR/stop"
    wait 2>/dev/null
    if findmnt "$MNT" >/dev/null 2>&1; then timeout 60 umount "$MNT" || timeout 60 umount -l "$MNT"; fi
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The fsync loop of bench/shrink.sh.
cat > "$DIR/fsyncs.py" <<'PY'
import os, sys, time
path, until, out = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
buf = os.urandom(4096)
lat = []
n = 0
while (until.isdigit() and n < int(until)) or (not until.isdigit() and not os.path.exists(until)):
    os.pwrite(fd, buf, 0)
    t = time.perf_counter()
    os.fsync(fd)
    lat.append((time.perf_counter() - t) * 1e6)
    n += 1
os.close(fd)
open(out, "w").write("\n".join("%.0f" % x for x in lat) + "\n")
PY
# The copy: `copy.py SRC DST MIB BS_MIB FLUSH_MIB`, direct I/O through
# one page-aligned buffer.
cat > "$DIR/copy.py" <<'PY'
import mmap, os, sys
src, dst, mib, bs_mib, flush_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
fi = os.open(src, os.O_RDONLY | os.O_DIRECT)
fo = os.open(dst, os.O_WRONLY | os.O_DIRECT)
buf = mmap.mmap(-1, bs_mib << 20)
done = since = 0
while done < mib:
    n = os.preadv(fi, [buf], done << 20)
    os.pwritev(fo, [buf[:n]] if n < len(buf) else [buf], done << 20)
    done += bs_mib
    since += bs_mib
    if flush_mib and since >= flush_mib:
        os.fdatasync(fo)
        since = 0
os.fdatasync(fo)
PY
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}'; }

echo "round  copy_MiB/s  idle_p50/p99_us  copy_p50/p99_us  n_fsyncs  load"
for r in $(seq 1 "$ROUNDS"); do
    rm -f "$DIR/img" "$DIR/copy" "$DIR/stop"
    truncate -s 8G "$DIR/img" || exit 1
    LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || exit 1
    "$TUX3" mkfs "$LOOP" >/dev/null || exit 1
    timeout 60 "$TUX3" mount "$LOOP" "$MNT" || exit 1
    dd if=/dev/urandom of="$MNT/big" bs=4M count=768 status=none || exit 1
    sync -f "$MNT"
    python3 "$DIR/fsyncs.py" "$MNT/fsync-idle" 1000 "$DIR/idle" || exit 1
    truncate -s 3G "$DIR/copy" || exit 1
    python3 "$DIR/fsyncs.py" "$MNT/fsync-busy" "$DIR/stop" "$DIR/busy" &
    loop_pid=$!
    t0=$(date +%s.%N)
    python3 "$DIR/copy.py" "$LOOP" "$DIR/copy" $((3072 / BS_MIB * BS_MIB)) "$BS_MIB" "$FLUSH_MIB" || exit 1
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    touch "$DIR/stop"
    wait "$loop_pid"
    rate=$(echo "$secs" | awk -v m=$((3072 / BS_MIB * BS_MIB)) '{printf "%.0f", m/$1}')
    echo "$r  $rate  $(pct "$DIR/idle" 50)/$(pct "$DIR/idle" 99)  $(pct "$DIR/busy" 50)/$(pct "$DIR/busy" 99)  $(wc -l < "$DIR/busy")  $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$DIR/rows"
    timeout 60 umount "$MNT" || exit 1
    losetup -d "$LOOP"
    LOOP=
done
python3 - "$DIR/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
p99 = lambda k: statistics.median(float(r[k].split("/")[1]) for r in rows)
rate, idle, busy = statistics.median(float(r[1]) for r in rows), p99(2), p99(3)
print("medians of %d rounds: copy %.0f MiB/s; fsync p99 %.0f us beside it vs %.0f us idle (%.2fx)"
      % (len(rows), rate, busy, idle, busy / idle))
PY
