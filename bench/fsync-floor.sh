#!/bin/bash
# bench/fsync-floor.sh: the least time dbench's Flushes can take on this
# machine's device, against what the engine takes, for one client. Runs on
# a loop device (direct I/O) over an image in SCRATCH, written in full first:
#   1. the device alone: fio, one 4 KiB and one 32 KiB O_DIRECT write, each
#      followed by fdatasync, queue depth 1 (a write and a flush, what an
#      fsync needs at least);
#   2. the engine: bench/engine's syncs load, one task appending 1 KiB and
#      fsyncing 3,000 times;
#   3. the engine: dbench's loadfile, one client, with its Flushes and
#      without them (--skip-flush), and the same with Flushes on a tmpfs;
# then prints what one fsync of the dbench run took (its time less the
# time the same operations take without Flushes) and the engine's speed if
# every fsync cost only the device's write and flush.
# Unmounts and detaches on every path. Root only.
#
# Usage: bench/fsync-floor.sh [SECONDS] [SCRATCH]   (SECONDS = 5, SCRATCH = /var/tmp)
set -u
SECS=${1:-5}
SCRATCH=${2:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ENGINE=$ROOT/target/release/tux3-bench-engine
LOADFILE=/usr/share/dbench/client.txt
[ "$(id -u)" = 0 ] || { echo "fsync-floor: run as root" >&2; exit 2; }
[ -x "$ENGINE" ] || { echo "fsync-floor: build bench/engine first (bench/run does, into target/release)" >&2; exit 2; }
[ -r "$LOADFILE" ] || { echo "fsync-floor: no dbench loadfile ($LOADFILE): apt-get install dbench" >&2; exit 2; }
command -v fio >/dev/null || { echo "fsync-floor: no fio: apt-get install fio" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/fsync-floor.XXXXXX")
LOOP=
cleanup() {
    findmnt "$DIR/tmpfs" >/dev/null 2>&1 && umount "$DIR/tmpfs"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

dd if=/dev/zero of="$DIR/img" bs=64M count=64 oflag=direct status=none || exit 1
LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || exit 1
mkdir "$DIR/tmpfs" && mount -t tmpfs -o size=4G fsync-floor "$DIR/tmpfs" || exit 1

raw() {
    fio --name=raw --filename="$LOOP" --direct=1 --rw=randwrite --bs="$1" --size=1G \
        --iodepth=1 --fdatasync=1 --runtime="$SECS" --time_based --output-format=json
}
engine() { timeout $((SECS * 10 + 120)) "$ENGINE" "$@"; }

R4=$(raw 4k) || exit 1
R32=$(raw 32k) || exit 1
SYNCS=$(engine syncs --engine "$LOOP" --tasks 1 --steps 3000) || exit 1
FLUSH=$(engine dbench --engine "$LOOP" --loadfile "$LOADFILE" --clients 1 --seconds "$SECS") || exit 1
NOFLUSH=$(engine dbench --engine "$LOOP" --loadfile "$LOADFILE" --clients 1 --seconds "$SECS" --skip-flush) || exit 1
mkdir "$DIR/tmpfs/d"
TMPFS=$(engine dbench --posix "$DIR/tmpfs/d" --loadfile "$LOADFILE" --clients 1 --seconds "$SECS") || exit 1

python3 - "$R4" "$R32" "$SYNCS" "$FLUSH" "$NOFLUSH" "$TMPFS" <<'EOF'
import json, sys

def cycle_us(fio):
    w = json.loads(fio[fio.index("{"):])["jobs"][0]["write"]
    return 1e6 / w["iops"]

r4, r32 = cycle_us(sys.argv[1]), cycle_us(sys.argv[2])
syncs, flush, noflush, tmpfs = (json.loads(a.strip().splitlines()[-1]) for a in sys.argv[3:7])
print("device, write + fdatasync at queue depth 1: 4 KiB %.0f us, 32 KiB %.0f us" % (r4, r32))
print("engine syncs 1x3000 (1 KiB append + fsync): %.0f us per fsync, %.2f blocks and %.2f flushes each"
      % (1e6 * syncs["seconds"] / syncs["fsyncs"], syncs["dev_blocks"] / syncs["fsyncs"],
         syncs["dev_flushes"] / syncs["fsyncs"]))
# Time the dbench run's operations take without their Flushes, at the
# rate of the run without Flushes; the rest is its fsyncs.
ops_s = noflush["ops"] / noflush["seconds"]
t_ops = flush["ops"] / ops_s
per = (flush["seconds"] - t_ops) / flush["fsyncs"]
print("engine dbench, 1 client: %.0f MB/s with Flushes (%d fsyncs, %.1f blocks each), %.0f MB/s without"
      % (flush["mb_s"], flush["fsyncs"], flush["dev_blocks"] / flush["fsyncs"], noflush["mb_s"]))
print("  its operations other than Flush: %.2f s of %.2f s; one fsync: %.0f us" % (t_ops, flush["seconds"], 1e6 * per))
best = flush["mb_s"] * flush["seconds"] / (t_ops + flush["fsyncs"] * r32 / 1e6)
print("  every fsync at the device's 32 KiB write + fdatasync: %.0f MB/s at most" % best)
print("tmpfs dbench, 1 client, with Flushes: %.0f MB/s; engine %.2fx, at most %.2fx"
      % (tmpfs["mb_s"], flush["mb_s"] / tmpfs["mb_s"], best / tmpfs["mb_s"]))
EOF
