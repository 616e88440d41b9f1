#!/usr/bin/env bash
# The POSIX behaviour suite (posix/) through a real tux3 mount, then on the
# reference filesystems (tmpfs and ext4 on a loop device, posix/run-reference.sh).
# Every case must pass everywhere, and fsck must be clean after the unmount.
# Needs root (mount(2)) and /dev/fuse.
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
timeout 900 cargo build --quiet --release --manifest-path posix/Cargo.toml
suite="$root/posix/target/release/posix-suite"

# One run of the suite through a fresh tux3 mount with mount options $1.
run_tux3() {
    local opts=$1
    echo "posix-all: tux3 -o $opts (sparse 1 GiB image)"
    rm -f "$img"
    timeout 60 "$TUX3" mkfs --size 1G "$img" >/dev/null
    mkdir -p "$mnt"
    : >"$work/server.log"
    timeout 60 "$TUX3" mount -o "$opts" "$img" "$mnt" 2>"$work/server.log"
    local rc=0
    timeout --kill-after=10 "$run_timeout" "$suite" "$mnt" | tee "$work/tux3.out" || rc=$?
    # Wait for the server to commit and exit: umount returns before it closes the
    # volume, and fsck must see the closed image (the image lock is the signal).
    timeout 60 umount "$mnt"
    timeout 60 flock -x "$img" true
    local fsck_rc=0
    timeout 300 "$TUX3" fsck "$img" || fsck_rc=$?
    if [[ -s $work/server.log ]]; then
        echo "posix-all: server messages:" >&2
        cat "$work/server.log" >&2
    fi
    if [[ $rc -ne 0 ]]; then
        echo "posix-all: tux3 -o $opts: FAILED (exit $rc)" >&2
        exit 1
    fi
    if [[ $fsck_rc -ne 0 ]]; then
        echo "posix-all: tux3 -o $opts: fsck exit $fsck_rc after the suite" >&2
        exit 1
    fi
}

# allow_other: the permission cases switch to uid 65534, which FUSE would
# otherwise turn away with EACCES before the filesystem is asked.
# Both transports: /dev/fuse, and io_uring where the kernel has it (the
# fuse module's enable_uring parameter, set for the run and put back).
run_tux3 allow_other,nouring
enable=/sys/module/fuse/parameters/enable_uring
if [[ -w $enable ]]; then
    uring_was=$(cat "$enable")
    echo Y >"$enable"
    run_tux3 allow_other,uring
    echo "$uring_was" >"$enable"
    uring_was=
else
    echo "posix-all: no FUSE over io_uring in this kernel: the uring transport is not run"
fi

echo "posix-all: reference filesystems"
POSIX_TIMEOUT="$run_timeout" timeout 1200 posix/run-reference.sh
echo "posix-all: tux3, tmpfs and ext4 all pass"
