#!/usr/bin/env bash
# What a real `make install` gives (DESTDIR into a temp prefix is not seen
# by mount(8), mkfs(8), fsck(8) or man(1)): `mount -t tux3 IMG DIR`, which
# runs /sbin/mount.tux3, lets another user in (and -o noallow_other keeps
# them out); `mkfs -t tux3` and `fsck -t tux3` (/sbin/mkfs.tux3,
# /sbin/fsck.tux3) on a loop device, with fsck(8)'s exit codes, and fsck
# as it runs at boot for an fstab line of type tux3; and the man pages. Installs into the system: run it only on a throwaway machine
# (.ci/run does, after make test). Needs root.
#
# Everything lives under one mktemp directory; cleanup unmounts only its
# own mount point and detaches only its own loop device, on every path.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
[[ $(id -u) -eq 0 ]] || { echo "mount-t: must run as root" >&2; exit 2; }

timeout 900 make install
command -v tux3 >/dev/null || { echo "mount-t: tux3 not on PATH after make install" >&2; exit 1; }
for helper in mount mkfs fsck; do
    [[ -x /sbin/$helper.tux3 ]] || { echo "mount-t: /sbin/$helper.tux3 missing" >&2; exit 1; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/mount-t.XXXXXX")"
# Another user must be able to reach the mount point.
chmod 0755 "$work"
img="$work/img"
mnt="$work/mnt"
loop=
# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
        timeout 60 umount "$mnt" || timeout 10 umount -l "$mnt"
    fi
    if [[ -n $loop ]]; then
        losetup -d "$loop"
    fi
    rm -rf --one-file-system "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The man pages: in MANDIR (make's default), roff pages of section 8.
mandir=/usr/local/share/man/man8
for page in tux3 mount.tux3 mkfs.tux3 fsck.tux3 tux3-mount; do
    grep -q "^\.TH $page 8 " "$mandir/$page.8" ||
        { echo "mount-t: $mandir/$page.8 missing or not a section 8 page" >&2; exit 1; }
    if command -v man >/dev/null; then
        shown=$(MANWIDTH=80 timeout 30 man -l "$mandir/$page.8")
        [[ $shown == "$page(8)"* ]] ||
            { echo "mount-t: man -l $mandir/$page.8 does not render" >&2; exit 1; }
    fi
done

# As nobody (uid and gid 65534, no supplementary groups).
as_nobody() {
    setpriv --reuid=65534 --regid=65534 --clear-groups "$@"
}

# mount(8) and mount.tux3, with the defaults of a real filesystem.
timeout 60 tux3 mkfs --size 256M "$img" >/dev/null
mkdir "$mnt"
timeout 60 mount -t tux3 -o noatime "$img" "$mnt" 2>>"$work/server.log"
line=$(grep -F " $mnt fuse.tux3 " /proc/mounts)
echo "$line"
[[ $line == *allow_other* ]] || { echo "mount-t: a mount by root lacks allow_other" >&2; exit 1; }
echo hello >"$mnt/hello"
[[ $(as_nobody cat "$mnt/hello") == hello ]] ||
    { echo "mount-t: another user cannot read a 0644 file" >&2; exit 1; }
# mount -o remount through mount(8) (mount.fuse.tux3): read-only refuses
# writers, read-write lets them in again.
timeout 60 mount -o remount,ro "$mnt"
if echo no >"$mnt/after-ro" 2>/dev/null; then
    echo "mount-t: a write after mount -o remount,ro succeeded" >&2; exit 1
fi
timeout 60 mount -o remount,rw "$mnt"
echo yes >"$mnt/after-rw" || { echo "mount-t: no write after mount -o remount,rw" >&2; exit 1; }
timeout 60 umount "$mnt"
timeout 60 flock -x "$img" true
# noallow_other goes through mount(8), which keeps `private` for itself.
timeout 60 mount -t tux3 -o ro,noallow_other "$img" "$mnt" 2>>"$work/server.log"
[[ $(cat "$mnt/hello") == hello ]]
if as_nobody cat "$mnt/hello" 2>/dev/null; then
    echo "mount-t: -o noallow_other let another user in" >&2
    exit 1
fi
timeout 60 umount "$mnt"
timeout 60 flock -x "$img" true
timeout 300 tux3 fsck "$img"
echo "mount-t: mount -t tux3 works"

# mkfs(8) and fsck(8) on a loop device.
truncate -s 128M "$work/dev.img"
loop=$(losetup --find --show "$work/dev.img")
timeout 60 mkfs -t tux3 -q "$loop"
if timeout 60 mkfs -t tux3 -q "$loop" 2>>"$work/mkfs.err"; then
    echo "mount-t: mkfs -t tux3 formatted over a tux3 volume without -F" >&2
    exit 1
fi
timeout 60 mkfs -t tux3 -q -F "$loop"
for flags in -n -a -p -y -fy; do
    rc=0
    timeout 60 fsck -t tux3 "$flags" "$loop" || rc=$?
    [[ $rc -eq 0 ]] || { echo "mount-t: fsck -t tux3 $flags $loop: exit $rc on a clean volume" >&2; exit 1; }
done
rc=0
timeout 60 fsck -t tux3 -n -y "$loop" 2>/dev/null || rc=$?
[[ $rc -eq 16 ]] || { echo "mount-t: fsck -t tux3 -n -y: exit $rc, not 16 (usage)" >&2; exit 1; }
# At boot, systemd-fsck runs `fsck -a -T -l -M DEV` with no type: fsck(8)
# takes it from the device's fstab line (blkid does not know tux3), here a
# throwaway fstab (LIBMOUNT_FSTAB) instead of /etc/fstab.
printf '%s %s tux3 defaults 0 2\n' "$loop" "$mnt" >"$work/fstab"
ran=$(LIBMOUNT_FSTAB="$work/fstab" timeout 60 fsck -N -a -T -l -M "$loop")
[[ $ran == *"fsck.tux3 -a $loop"* ]] ||
    { echo "mount-t: fsck at boot would not run fsck.tux3: $ran" >&2; exit 1; }
rc=0
LIBMOUNT_FSTAB="$work/fstab" timeout 60 fsck -a -T -l -M "$loop" || rc=$?
[[ $rc -eq 0 ]] || { echo "mount-t: fsck -a -T -l -M $loop (fstab): exit $rc on a clean volume" >&2; exit 1; }
losetup -d "$loop"
loop=
rc=0
timeout 60 fsck -t tux3 -n "$work/no-such-device" 2>/dev/null || rc=$?
[[ $rc -eq 8 ]] || { echo "mount-t: fsck of a missing device: exit $rc, not 8" >&2; exit 1; }
echo "mount-t: mkfs -t tux3, fsck -t tux3 and the man pages work"
