#!/bin/bash
# bench/request-origins.sh OPCODE CMD...: run CMD (a workload on a FUSE
# mount) under `perf record` of the kernel's fuse:fuse_request_send
# tracepoint with call stacks, then print how many requests of each opcode
# the kernel sent, and for OPCODE (e.g. FUSE_GETATTR) which kernel paths
# sent them (the first frames above FUSE's own send path). Root; perf from
# Debian's linux-perf. Measured by hand: bench/requests.md says what it
# showed.
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: $0 OPCODE CMD..." >&2
    exit 2
fi
op=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
perf record -q -e fuse:fuse_request_send -g -a -o "$work/perf.data" -- "$@" >/dev/null
perf script -i "$work/perf.data" 2>/dev/null >"$work/script.txt"
python3 - "$op" "$work/script.txt" <<'PY'
import collections, re, sys
want, path = sys.argv[1], sys.argv[2]
# FUSE's own frames between the caller and the tracepoint.
send = re.compile(r"^(fuse_request_assign_unique|fuse_uring_queue_fuse_req|__fuse_simple_request|"
                  r"fuse_simple_request|fuse_send_one|fuse_dev_queue_req|queue_request_and_unlock|"
                  r"__fuse_request_send|fuse_request_send|fuse_do_getattr.*)$")
ops, paths, block = collections.Counter(), collections.Counter(), []
def done(b):
    if not b:
        return
    m = re.search(r"\((FUSE_\w+)\)", b[0])
    if not m:
        return
    ops[m.group(1)] += 1
    if m.group(1) == want:
        frames = [l.split()[1].split("+")[0] for l in b[1:] if l.strip()]
        frames = [f for f in frames if not send.match(f)]
        paths[" < ".join(frames[:4])] += 1
for line in open(path):
    if "fuse:fuse_request_send" in line:
        done(block)
        block = [line]
    else:
        block.append(line)
done(block)
total = sum(ops.values())
print("requests: %d" % total)
for o, n in ops.most_common():
    print("  %-20s %8d  %5.1f%%" % (o, n, 100.0 * n / total))
print("%s sent from:" % want)
for p, n in paths.most_common(8):
    print("  %8d  %5.1f%%  %s" % (n, 100.0 * n / max(1, ops[want]), p))
PY
