#!/usr/bin/env bash
# cp -a a tree into a fresh tux3 mount, diff -r it against the source,
# unmount, remount, diff again, and check fsck exits 0. Needs root.
#
# Usage: scripts/cp-diff.sh [DIR]      (default /usr/include)
# Env:   TUX3  the tux3 binary (default target/release/tux3)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TUX3="$(realpath -m "${TUX3:-$root/target/release/tux3}")"
src="$(realpath "${1:-/usr/include}")"
[[ $(id -u) -eq 0 ]] || { echo "cp-diff: must run as root" >&2; exit 2; }
[[ -x $TUX3 ]] || { echo "cp-diff: $TUX3 not built (make build)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/cp-diff.XXXXXX")"
img="$work/img"
mnt="$work/mnt"
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
        timeout 120 umount "$mnt" || timeout 10 umount -l "$mnt"
    fi
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

unmount() {
    timeout 120 umount "$mnt"
    # The server holds the image's lock until it has closed the volume.
    timeout 120 flock -x "$img" true
}

timeout 60 "$TUX3" mkfs --size 4G "$img" >/dev/null
mkdir "$mnt"
timeout 60 "$TUX3" mount "$img" "$mnt" 2>>"$work/server.log"
echo "cp-diff: cp -a $src $mnt/"
timeout 900 cp -a "$src" "$mnt/"
dest="$mnt/$(basename "$src")"
timeout 900 diff -r "$src" "$dest"
echo "cp-diff: identical through the mount; remounting"
unmount
timeout 60 "$TUX3" mount "$img" "$mnt" 2>>"$work/server.log"
timeout 900 diff -r "$src" "$dest"
echo "cp-diff: identical after the remount"
unmount
timeout 300 "$TUX3" fsck "$img"
