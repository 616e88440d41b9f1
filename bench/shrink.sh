#!/bin/bash
# bench/shrink.sh: an online shrink of a half-full volume by half, against
# the device's sequential read bandwidth, and the fsync latency another
# process sees during it. Per round, on a loop device (direct I/O) over a
# fresh sparse image of SIZE in SCRATCH, mounted with `tux3 mount`:
#   1. FILES files of 64 MiB (7/8 of the volume), every other one deleted:
#      the live half is spread over the whole volume, so what lies in the
#      upper half must move into the holes of the lower one;
#   2. idle: a separate process writes 4 KiB at offset 0 of its own file
#      and fsyncs, 1,000 times: p50 and p99 of the fsync;
#   3. `dd iflag=direct` of 2 GiB of the loop device (live data): MiB/s;
#   4. `tux3 resize MNT SIZE/2` with the same fsync loop running beside it
#      until the resize returns: the resize's time, the loop device's
#      read and written sectors during it (/sys/block/loopN/stat), the
#      fsync p50 and p99 during it, and the server's CPU seconds;
#   5. unmount, `tux3 fsck` of the loop device.
# Prints one line per round and the medians: MiB moved per second (the
# device's written MiB over the resize's time) against dd's MiB/s, and
# the fsync p99 during the shrink against idle. Unmounts, detaches and
# deletes on every path. Root only.
#
# Usage: bench/shrink.sh [ROUNDS] [SIZE] [SCRATCH]   (defaults 3, 8G, /var/tmp)
set -u
ROUNDS=${1:-3}
SIZE=${2:-8G}
SCRATCH=${3:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=${TUX3:-$ROOT/target/release/tux3}
[ "$(id -u)" = 0 ] || { echo "shrink: run as root" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "shrink: build the cli first (cargo build --release -p tux3-cli)" >&2; exit 2; }
BYTES=$(numfmt --from=iec "$SIZE")
FILES=$((BYTES * 7 / 8 / (64 << 20)))

DIR=$(mktemp -d "$SCRATCH/shrink.XXXXXX")
LOOP=
MNT=$DIR/mnt
mkdir "$MNT"
cleanup() {
    [ -f "$DIR/stop" ] || touch "$DIR/stop"
    if findmnt "$MNT" >/dev/null 2>&1; then timeout 60 umount "$MNT" || timeout 60 umount -l "$MNT"; fi
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The fsync loop: `fsyncs.py FILE N|STOPFILE OUT` writes 4 KiB at offset 0
# and fsyncs, N times or until STOPFILE exists, and writes each fsync's
# microseconds to OUT.
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
pct() { sort -n "$1" | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}'; }
sectors() { awk '{print $3, $7}' "/sys/block/$(basename "$LOOP")/stat"; }
# The server's user + system CPU seconds (/proc/PID/stat, fields 14 and 15).
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$1/stat"; }

echo "round  fill_s  dd_MiB/s  shrink_s  read_MiB  written_MiB  moved_MiB/s  idle_p50/p99_us  shrink_p50/p99_us  n_fsyncs  server_cpu_s  load"
for r in $(seq 1 "$ROUNDS"); do
    rm -f "$DIR/img" "$DIR/stop"
    truncate -s "$SIZE" "$DIR/img" || exit 1
    LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || exit 1
    "$TUX3" mkfs "$LOOP" >/dev/null || exit 1
    timeout 60 "$TUX3" mount "$LOOP" "$MNT" || exit 1
    t0=$(date +%s.%N)
    for i in $(seq 0 $((FILES - 1))); do
        dd if=/dev/urandom of="$MNT/f$i" bs=4M count=16 status=none || exit 1
    done
    sync -f "$MNT"
    for i in $(seq 0 2 $((FILES - 1))); do rm "$MNT/f$i"; done
    sync -f "$MNT"
    fill=$(echo "$(date +%s.%N) - $t0" | bc)
    python3 "$DIR/fsyncs.py" "$MNT/fsync-idle" 1000 "$DIR/idle" || exit 1
    ddr=$(dd if="$LOOP" of=/dev/null bs=16M count=128 skip=16 iflag=direct 2>&1 | awk '/copied/ {print $(NF-1), $NF}')
    dd_mib=$(echo "$ddr" | awk '{v=$1; if ($2 ~ /^GB/) v*=1000; if ($2 ~ /^kB/) v/=1000; printf "%.0f", v*1e6/1048576}')
    python3 "$DIR/fsyncs.py" "$MNT/fsync-busy" "$DIR/stop" "$DIR/busy" &
    loop_pid=$!
    server=$(pgrep -f -- "mount $LOOP $MNT" | head -1)
    cpu0=$(cpu "$server")
    before=$(sectors)
    t0=$(date +%s.%N)
    timeout 1200 "$TUX3" resize "$MNT" $((BYTES / 2)) || { echo "shrink: resize failed" >&2; exit 1; }
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    after=$(sectors)
    cpu1=$(cpu "$server")
    touch "$DIR/stop"
    wait "$loop_pid"
    read_mib=$(echo "$before $after" | awk '{printf "%.0f", ($3-$1)*512/1048576}')
    wr_mib=$(echo "$before $after" | awk '{printf "%.0f", ($4-$2)*512/1048576}')
    rate=$(echo "$wr_mib $secs" | awk '{printf "%.0f", $1/$2}')
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "$r  $fill  $dd_mib  $secs  $read_mib  $wr_mib  $rate  $(pct "$DIR/idle" 50)/$(pct "$DIR/idle" 99)  $(pct "$DIR/busy" 50)/$(pct "$DIR/busy" 99)  $(wc -l < "$DIR/busy")  $(echo "$cpu0 $cpu1" | awk '{printf "%.1f", $2 - $1}')  $load" | tee -a "$DIR/rows"
    timeout 60 umount "$MNT" || exit 1
    "$TUX3" fsck "$LOOP" >"$DIR/fsck" 2>&1 || { echo "shrink: fsck found problems:" >&2; cat "$DIR/fsck" >&2; exit 1; }
    losetup -d "$LOOP"
    LOOP=
done
python3 - "$DIR/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = lambda k: statistics.median(float(r[k]) for r in rows)
p99 = lambda k: statistics.median(float(r[k].split("/")[1]) for r in rows)
dd, mv = med(2), med(6)
idle, busy = p99(7), p99(8)
print("medians of %d rounds: moved %.0f MiB/s vs dd %.0f MiB/s (%.0f%%); "
      "fsync p99 %.0f us during the shrink vs %.0f us idle (%.2fx); server CPU %.1f s per shrink"
      % (len(rows), mv, dd, 100 * mv / dd, busy, idle, busy / idle, med(10)))
PY
