#!/bin/bash
# bench/atime.sh: what access times cost the meta workload's `tree read`
# step (bench/c/meta.c: open, read whole and close N small files in a
# two-level tree, caches dropped first) on tux3, under each access-time
# rule. One volume on a loop device (direct I/O) over an image in SCRATCH,
# mounted once; the tree is created once. Each round times one read per
# rule, in an order that turns from round to round: the mount is switched
# to the rule (`-o remount,RULE`), every file and directory of the tree
# gets a new change time (chmod), so that relatime moves every access time
# as on the first read after a create (as in bench/run), then everything is
# synced (`tux3 sync`: the open delta starts clean) and the caches dropped.
# The same files, the same blocks, under each rule.
# Unmounts and detaches on every path (space-lib.sh). Root only; the tux3
# binary as space-lib.sh finds it ($TUX3, else the cargo target dir).
#
# Usage: bench/atime.sh [ROUNDS] [N] [RULES] [SCRATCH]
#        (11, 5000, "noatime relatime strictatime", /var/tmp)
# Prints one line per read (rule, seconds, the daemon's CPU seconds), then
# per rule the median of each and the ratio of its median to the first
# rule's, and the load average.
set -u -o pipefail
ROUNDS=${1:-11}
N=${2:-5000}
RULES=${3:-noatime relatime strictatime}
SCRATCH=${4:-/var/tmp}
. "$(dirname "$0")/space-lib.sh"
space_need_root atime
space_init atime "$SCRATCH"

gcc -O2 -o "$SPACE_DIR/meta" "$SPACE_ROOT/bench/c/meta.c" || exit 1
space_image "$SPACE_DIR/img" 1024
space_attach "$SPACE_DIR/img"
space_mkfs tux3
space_mount tux3
[ -n "$SPACE_PID" ] || die "no tux3 server found"
TREE=$SPACE_MNT/tree
mkdir "$TREE" || exit 1
timeout 300 "$SPACE_DIR/meta" tree "$TREE" "$N" create >/dev/null || die "tree create failed"
# One read untimed first: the first after the create is slower whatever
# the rule (0.6 s against 0.03 s for 500 files).
space_sync
drop_caches
timeout 300 "$SPACE_DIR/meta" tree "$TREE" "$N" read >/dev/null || die "tree read failed"

# The daemon's CPU time in ns: the run time of all its threads
# (/proc/PID/task/*/schedstat), the kernel's work in them included.
cpu_ns() { cat /proc/"$SPACE_PID"/task/*/schedstat | awk '{s += $1} END {printf "%.0f\n", s}'; }
one() {  # one read under rule $1: prints "RULE SECONDS CPU"
    local out t0 t1
    timeout 120 "$TUX3" mount -o "remount,$1" "$SPACE_DEV" "$SPACE_MNT" || return 1
    timeout 300 chmod -R a+r "$TREE" || return 1
    space_sync
    echo 3 > /proc/sys/vm/drop_caches
    t0=$(cpu_ns)
    out=$(timeout 300 "$SPACE_DIR/meta" tree "$TREE" "$N" read) || return 1
    t1=$(cpu_ns)
    python3 -c 'import json, sys; r = json.loads(sys.argv[2]); print("%s %.4f %.4f" % (sys.argv[1], r["seconds"], int(sys.argv[3]) / 1e9))' \
        "$1" "$out" $((t1 - t0))
}
read -r -a rules <<<"$RULES"
: >"$SPACE_DIR/results"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
    k=$(( (r - 1) % ${#rules[@]} ))
    for rule in "${rules[@]:k}" "${rules[@]:0:k}"; do
        one "$rule" | tee -a "$SPACE_DIR/results" || die "$rule failed"
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$SPACE_DIR/results" "${rules[@]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
base = None
for rule in sys.argv[2:]:
    secs = [float(r[1]) for r in rows if r[0] == rule]
    cpu = [float(r[2]) for r in rows if r[0] == rule]
    med, mcpu = statistics.median(secs), statistics.median(cpu)
    base = base or (med, mcpu)
    print("%-12s %d rounds: median %.4f s (%.3fx; min %.4f, max %.4f), daemon CPU %.4f s (%.3fx)"
          % (rule, len(secs), med, med / base[0], min(secs), max(secs), mcpu, mcpu / base[1]))
PY
