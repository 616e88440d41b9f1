#!/usr/bin/env bash
# `mount -t tux3 IMG DIR` through mount(8), which runs /sbin/mount.tux3: so
# this needs a real `make install` (DESTDIR into a temp prefix is not seen
# by mount(8)). Installs into the system: run it only on a throwaway
# machine (.ci/run does, after make test). Needs root.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ $(id -u) -eq 0 ]] || { echo "mount-t: must run as root" >&2; exit 2; }

timeout 900 make install
command -v tux3 >/dev/null || { echo "mount-t: tux3 not on PATH after make install" >&2; exit 1; }
[[ -x /sbin/mount.tux3 ]] || { echo "mount-t: /sbin/mount.tux3 missing" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/mount-t.XXXXXX")"
img="$work/img"
mnt="$work/mnt"
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
        timeout 60 umount "$mnt" || timeout 10 umount -l "$mnt"
    fi
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

timeout 60 tux3 mkfs --size 256M "$img" >/dev/null
mkdir "$mnt"
timeout 60 mount -t tux3 -o noatime "$img" "$mnt" 2>>"$work/server.log"
grep -F " $mnt fuse.tux3 " /proc/mounts
echo hello >"$mnt/hello"
timeout 60 umount "$mnt"
timeout 60 flock -x "$img" true
timeout 60 mount -t tux3 -o ro "$img" "$mnt" 2>>"$work/server.log"
[[ $(cat "$mnt/hello") == hello ]]
timeout 60 umount "$mnt"
timeout 60 flock -x "$img" true
timeout 300 tux3 fsck "$img"
echo "mount-t: mount -t tux3 works"
