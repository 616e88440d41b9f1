#!/bin/bash
# bench/wakeups.sh: how much of a FUSE request's cost on this machine is the
# wake-up of a task on the other, idle CPU. Runs single-threaded metadata
# (bench/c/meta.c: flat create and stat of N files, tree create of N/2) on
# tux3 (through the mount) and ext4, on a loop device over an image in
# SCRATCH, once with the guest's idle halt polling off (the cpuidle haltpoll
# driver's guest_halt_poll_ns = 0: an idle vCPU halts at once, so waking a
# task there costs an exit to the host) and once with 200 us of polling;
# tux3 both without its idle-priority replies (`-o noidle_queues`) and as
# mounted by default (`idle_queues`: a reply wakes its caller on the same
# CPU).
# Then, with the machine's setting (restored), tux3 mounted with
# `-o idle_poll=200`: the server's own pollers keep the idle CPUs awake.
# Restores the setting, unmounts and detaches on every path. Root only.
#
# Usage: bench/wakeups.sh [N] [SCRATCH]   (N = 50000, SCRATCH = /var/tmp)
# Prints one line per filesystem, setting and step: ops/s.
set -u
N=${1:-50000}
SCRATCH=${2:-/var/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TUX3=$ROOT/target/release/tux3
POLL=/sys/module/haltpoll/parameters/guest_halt_poll_ns
[ "$(id -u)" = 0 ] || { echo "wakeups: run as root" >&2; exit 2; }
[ -w "$POLL" ] || { echo "wakeups: no haltpoll driver here ($POLL): nothing to compare" >&2; exit 2; }
[ -x "$TUX3" ] || { echo "wakeups: build first (cargo build --release)" >&2; exit 2; }

DIR=$(mktemp -d "$SCRATCH/wakeups.XXXXXX")
OLD=$(cat "$POLL")
LOOP=
cleanup() {
    findmnt "$DIR/mnt" >/dev/null 2>&1 && timeout 60 umount "$DIR/mnt"
    wait
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    echo "$OLD" > "$POLL"
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

gcc -O2 -o "$DIR/meta" "$ROOT/bench/c/meta.c" || exit 1
truncate -s 4G "$DIR/img"
LOOP=$(losetup --direct-io=on -f --show "$DIR/img") || exit 1
mkdir "$DIR/mnt"

# run FS: format, mount, the three steps (with the server's CPU time per
# operation for tux3), unmount.
run() {
    local fs=$1 step
    if [ "${fs%% *}" = tux3 ]; then
        "$TUX3" mkfs "$LOOP" >/dev/null || return 1
        # shellcheck disable=SC2086 # "tux3 -o OPTS": the options after the name
        "$TUX3" mount ${fs#tux3} "$LOOP" "$DIR/mnt" &
        for _ in $(seq 100); do findmnt "$DIR/mnt" >/dev/null && break; sleep 0.1; done
    else
        # The last server's device may stay open a moment after it exits
        # (its rings are torn down asynchronously): retry for up to 10 s.
        for _ in $(seq 100); do mkfs.ext4 -q -F "$LOOP" 2>/dev/null && break; sleep 0.1; done
        mount "$LOOP" "$DIR/mnt" || return 1
    fi
    mkdir "$DIR/mnt/f" "$DIR/mnt/t"
    local pid
    pid=$(pgrep -n -f "tux3 mount.* $LOOP $DIR/mnt")
    for step in "flat $N create" "flat $N stat" "tree $((N / 2)) create"; do
        set -- $step
        local out before after
        before=$(cpu_ticks "$pid")
        out=$(timeout 600 "$DIR/meta" "$1" "$DIR/mnt/${1:0:1}" "$2" "$3")
        after=$(cpu_ticks "$pid")
        python3 -c 'import json,sys; d=json.loads(sys.argv[1]); a=sys.argv[5:]; cpu="  server %5.1f us/op" % ((int(a[1]) - int(a[0])) * 1e6 / int(a[2]) / d["ops"]) if a[0] else ""; print("%-24s %-18s %-12s %9.0f ops/s%s" % (sys.argv[2], sys.argv[3], sys.argv[4], d["ops"] / d["seconds"], cpu))' \
            "$out" "$fs" "halt_poll=$(cat "$POLL")" "$1 $3" "$before" "$after" "$(getconf CLK_TCK)"
    done
    if [ -n "$pid" ]; then
        timeout 60 "$TUX3" umount "$DIR/mnt"
    else
        timeout 60 umount "$DIR/mnt"
    fi
    wait
}

# cpu_ticks PID: user + system clock ticks of the process (empty if none).
cpu_ticks() {
    [ -n "$1" ] && awk '{ print $14 + $15 }' "/proc/$1/stat"
}

for poll in 0 200000; do
    echo "$poll" > "$POLL"
    for fs in "tux3 -o noidle_queues" tux3 ext4; do
        run "$fs" || exit 1
    done
done
echo "$OLD" > "$POLL"
run "tux3 -o idle_poll=200" || exit 1
