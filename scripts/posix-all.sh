#!/usr/bin/env bash
# The POSIX behaviour suite (posix/) through a real tux3 mount with the
# default options, then on the reference filesystems (tmpfs and ext4 on a
# loop device, posix/run-reference.sh). Every case must pass everywhere, the
# permission cases (run as other users) must not be skipped, and fsck must be
# clean after the unmount. A control run through a mount that lets only root
# in (-o private) shows that the permission cases fail when other users are
# kept out. Needs root (mount(2)) and /dev/fuse.
#
# Usage: scripts/posix-all.sh
# Env:   TUX3           the tux3 binary (default target/release/tux3, built if missing)
#        POSIX_TIMEOUT  seconds allowed for each suite run (default 300)
#
# Everything lives under one mktemp directory; cleanup unmounts only its own
# mount point, on every exit path.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
TUX3="${TUX3:-target/release/tux3}"
TUX3="$(realpath -m "$TUX3")"
run_timeout="${POSIX_TIMEOUT:-300}"

if [[ $(id -u) -ne 0 ]]; then
    echo "posix-all: must run as root (it mounts tux3, tmpfs and ext4)" >&2
    exit 2
fi
if [[ ! -e /dev/fuse ]]; then
    timeout 30 modprobe fuse 2>/dev/null || true
fi
if [[ ! -e /dev/fuse ]]; then
    echo "posix-all: /dev/fuse is missing (modprobe fuse failed)" >&2
    exit 2
fi
for tool in mountpoint umount timeout cargo findmnt; do
    command -v "$tool" >/dev/null || { echo "posix-all: $tool not found" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/posix-all.XXXXXX")"
# The permission cases run as uid 65534, which must be able to reach the mount.
chmod 0755 "$work"
img="$work/tux3.img"
mnt="$work/mnt"

# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -n ${uring_was:-} ]]; then
        echo "$uring_was" >/sys/module/fuse/parameters/enable_uring
    fi
    if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
        timeout 60 umount "$mnt" || timeout 10 umount -l "$mnt" ||
            echo "posix-all: could not unmount $mnt" >&2
    fi
    # --one-file-system: never descend into a mount that failed to unmount.
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "posix-all: building tux3 and posix-suite"
timeout 900 cargo build --quiet --release
timeout 900 cargo build --quiet --release --manifest-path posix/Cargo.toml --target-dir posix/target
suite="$root/posix/target/release/posix-suite"

# One run of the suite through a fresh tux3 mount with mount options $1
# (and posix-suite options after it). It must pass, with no permission case
# skipped: they run as other users through the mount.
run_tux3() {
    local opts=$1
    shift
    mount_volume "$opts"
    local rc=0
    timeout --kill-after=10 "$run_timeout" "$suite" "$@" "$mnt" | tee "$work/tux3.out" || rc=$?
    unmount_and_check
    if [[ $rc -ne 0 ]]; then
        echo "posix-all: tux3 -o $opts: FAILED (exit $rc)" >&2
        exit 1
    fi
    if grep -q '^skip perms/' "$work/tux3.out"; then
        echo "posix-all: tux3 -o $opts: permission cases skipped" >&2
        exit 1
    fi
}

# A fresh sparse 1 GiB volume mounted on $mnt with options $1.
mount_volume() {
    echo "posix-all: tux3 -o $1 (sparse 1 GiB image)"
    rm -f "$img"
    timeout 60 "$TUX3" mkfs --size 1G "$img" >/dev/null
    mkdir -p "$mnt"
    : >"$work/server.log"
    # The server logs to the system log unless told a file (log=).
    timeout 60 "$TUX3" mount -o "$1,log=$work/server.log" "$img" "$mnt" 2>>"$work/server.log"
}

# Unmount, wait for the server to commit and exit (umount returns before it
# closes the volume, and fsck must see the closed image: the image lock is
# the signal), show what the server said, and require a clean fsck.
unmount_and_check() {
    timeout 60 umount "$mnt"
    timeout 60 flock -x "$img" true
    local fsck_rc=0
    timeout 300 "$TUX3" fsck "$img" || fsck_rc=$?
    if [[ -s $work/server.log ]]; then
        echo "posix-all: server messages:" >&2
        cat "$work/server.log" >&2
    fi
    if [[ $fsck_rc -ne 0 ]]; then
        echo "posix-all: fsck exit $fsck_rc after the suite" >&2
        exit 1
    fi
}

# Default options: a mount by root lets every user in (allow_other), so the
# permission cases, which switch to uid 65534 and 65533, reach the
# filesystem and meet the kernel's checks.
# Both transports: /dev/fuse, and io_uring where the kernel has it (the
# fuse module's enable_uring parameter, set for the run and put back).
run_tux3 nouring
enable=/sys/module/fuse/parameters/enable_uring
if [[ -w $enable ]]; then
    uring_was=$(cat "$enable")
    echo Y >"$enable"
    run_tux3 uring
    echo "$uring_was" >"$enable"
    uring_was=
else
    echo "posix-all: no FUSE over io_uring in this kernel: the uring transport is not run"
fi

# The control: through a mount that lets only its mounter in (-o private),
# FUSE turns the other users away before the filesystem is asked, so the
# permission cases' positive controls must fail. If they passed, they would
# not notice a mount that refuses other users either.
mount_volume private,nouring
perm_rc=0
timeout --kill-after=10 "$run_timeout" "$suite" --filter perms/ "$mnt" >"$work/private.out" || perm_rc=$?
unmount_and_check
if [[ $perm_rc -eq 0 ]] || ! grep -q '^FAIL perms/.*control' "$work/private.out"; then
    echo "posix-all: the permission cases passed through -o private:" >&2
    cat "$work/private.out" >&2
    exit 1
fi
echo "posix-all: -o private: the permission cases fail as they must (other users kept out)"

echo "posix-all: reference filesystems"
POSIX_TIMEOUT="$run_timeout" timeout 1200 posix/run-reference.sh
echo "posix-all: tux3, tmpfs and ext4 all pass"
