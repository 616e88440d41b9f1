#!/usr/bin/env bash
# Build posix-suite and run it against a fresh tmpfs and a fresh ext4 loop
# mount: the reference filesystems every case must pass on. Needs root.
# Exits non-zero if the build fails or either run has a failed case.
#
# Usage: posix/run-reference.sh [posix-suite options, e.g. --filter rename]
# Env:   POSIX_TIMEOUT  seconds allowed for each suite run (default 300)
#
# Everything it creates lives under one mktemp directory; cleanup unmounts
# only its own mounts and detaches only the loop device backed by its own
# image, on every exit path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run_timeout="${POSIX_TIMEOUT:-300}"

if [[ $(id -u) -ne 0 ]]; then
    echo "run-reference: must run as root (it mounts tmpfs and an ext4 loop image)" >&2
    exit 2
fi
for tool in mkfs.ext4 losetup mount umount mountpoint timeout cargo; do
    command -v "$tool" >/dev/null || { echo "run-reference: $tool not found" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/posix-reference.XXXXXX")"
# The permission cases run as uid 65534, which must be able to reach the mounts.
chmod 0755 "$work"
img="$work/ext4.img"
# Our mount points: both inside our own $work, so cleanup touches nothing else.
mounts=("$work/ext4" "$work/tmpfs")

# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$? m
    trap - EXIT INT TERM
    set +e
    for m in "${mounts[@]}"; do
        if [[ -d $m ]] && mountpoint -q "$m"; then
            umount "$m" || { sleep 1; umount "$m"; } || echo "run-reference: could not unmount $m" >&2
        fi
    done
    # mount -o loop sets autoclear, so umount detached the device; detach
    # explicitly only a device still backed by our own image.
    if [[ -e $img ]]; then
        losetup -j "$img" 2>/dev/null | cut -d: -f1 | while read -r dev; do
            [[ -n $dev ]] && losetup -d "$dev"
        done
    fi
    # --one-file-system: never descend into a mount that failed to unmount.
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "run-reference: building posix-suite"
timeout 900 cargo build --quiet --release --manifest-path "$here/Cargo.toml" --target-dir "$here/target"
bin="$here/target/release/posix-suite"

total_pass=0 total_fail=0 total_skip=0
status=0

# run_on NAME MOUNTPOINT: run the suite there, add up its summary line.
run_on() {
    local name=$1 dir=$2 out rc=0
    echo "run-reference: $name ($(findmnt -n -o FSTYPE,SOURCE "$dir" | tr -s ' '))"
    out="$work/$name.out"
    timeout --kill-after=10 "$run_timeout" "$bin" "${@:3}" "$dir" | tee "$out" || rc=$?
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
        echo "run-reference: $name: timed out after ${run_timeout}s" >&2
    fi
    local line p f s
    line="$(grep -E '^posix: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$out" | tail -n1 || true)"
    if [[ -n $line ]]; then
        read -r p f s <<<"$(echo "$line" | sed -E 's/^posix: ([0-9]+) passed, ([0-9]+) failed, ([0-9]+) skipped$/\1 \2 \3/')"
        total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_skip=$((total_skip + s))
    else
        total_fail=$((total_fail + 1))
    fi
    if [[ $rc -ne 0 ]]; then
        echo "run-reference: $name: FAILED (exit $rc)" >&2
        status=1
    fi
}

# tmpfs
mkdir "$work/tmpfs"
mount -t tmpfs -o size=512m,mode=0755 posix-reference "$work/tmpfs"
run_on tmpfs "$work/tmpfs" "$@"

# ext4 on a loop device (defaults for a 256 MiB image: 1 KiB blocks)
truncate -s 256M "$img"
mkfs.ext4 -q -F "$img"
mkdir "$work/ext4"
mount -o loop "$img" "$work/ext4"
run_on ext4 "$work/ext4" "$@"

echo "reference: $total_pass passed, $total_fail failed, $total_skip skipped"
exit "$status"
