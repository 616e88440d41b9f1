#!/usr/bin/env bash
# `make demo`: tux3 end to end on this machine, through a real mount.
#
#   install what is missing (fuse3, graphviz), build, format a sparse image
#   demo/demo.img, mount it on demo/mnt, copy a sample tree in (/usr/include,
#   else src/), unmount and remount, check every file's sha256 through the
#   mount against the source, show df -h and the server's I/O counters,
#   unmount, fsck, print the dump's summary, and draw demo/volume.svg.
#
# Needs root (apt-get, mount(2)) and /dev/fuse. Leaves demo/demo.img and
# demo/volume.svg; the mount is undone on every exit path.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$HOME/.cargo/bin:$PATH"
TUX3="$root/target/release/tux3"
demo="$root/demo"
img="$demo/demo.img"
mnt="$demo/mnt"
sums="$demo/sample.sha256"
sample="${SAMPLE:-}"
if [[ -z $sample ]]; then
    if [[ -d /usr/include ]]; then sample=/usr/include; else sample="$root/src"; fi
fi
sample="$(realpath "$sample")"

say() { printf '\n== %s\n' "$*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "demo: must run as root (it installs packages and mounts through FUSE)" >&2
    exit 2
fi

# Packages, only when missing. fuse3 brings fusermount3 (not needed by root,
# but the usual tool to unmount FUSE mounts); graphviz brings dot for the SVG.
missing=()
command -v fusermount3 >/dev/null || missing+=(fuse3)
command -v dot >/dev/null || missing+=(graphviz)
command -v sha256sum >/dev/null || missing+=(coreutils)
command -v mountpoint >/dev/null || missing+=(util-linux)
if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]}"
    timeout 300 apt-get update
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y "${missing[@]}"
fi
if [[ ! -e /dev/fuse ]]; then
    timeout 30 modprobe fuse 2>/dev/null || true
fi
[[ -e /dev/fuse ]] || { echo "demo: /dev/fuse is missing (modprobe fuse failed)" >&2; exit 2; }
command -v cargo >/dev/null || { echo "demo: cargo not found (install Rust with rustup)" >&2; exit 2; }

# shellcheck disable=SC2317  # invoked through the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
        timeout 120 umount "$mnt" || timeout 10 umount -l "$mnt" ||
            echo "demo: could not unmount $mnt" >&2
    fi
    [[ -d $mnt ]] && ! mountpoint -q "$mnt" && rmdir "$mnt" 2>/dev/null
    rm -f "$sums"
    [[ $rc -ne 0 ]] && echo "demo: FAILED (exit $rc); server messages in $demo/server.log" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say "building"
timeout 900 cargo build --release

# The mount server of our image: the process whose command line names it.
server_pid() {
    local p
    for p in /proc/[0-9]*; do
        if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF "$img"; then
            basename "$p"
            return 0
        fi
    done
    return 1
}

# The server's I/O counters: /proc/PID/io counts every byte it moved through
# the image (rchar/wchar, syscr/syscw) since this mount.
show_counters() {
    local pid
    if pid="$(server_pid)"; then
        echo "mount server pid $pid, /proc/$pid/io:"
        sed 's/^/  /' "/proc/$pid/io"
    else
        echo "(mount server not found)"
    fi
}

mount_demo() {
    timeout 60 "$TUX3" mount "$img" "$mnt" 2>>"$demo/server.log"
    mountpoint -q "$mnt"
}

# tux3 umount returns once the server has committed and closed the volume
# (a bare umount(2) returns before; umount(8) waits too once make install
# has put umount.fuse.tux3 in /sbin).
unmount_demo() {
    timeout 120 "$TUX3" umount "$mnt"
}

mkdir -p "$demo"
if [[ -d $mnt ]] && mountpoint -q "$mnt"; then
    echo "demo: $mnt is already mounted (a previous demo still running?)" >&2
    exit 1
fi
mkdir -p "$mnt"
rm -f "$img" "$demo/volume.svg" "$demo/server.log"

say "tux3 mkfs --size 4G $img (sparse)"
timeout 60 "$TUX3" mkfs --size 4G "$img"

say "tux3 mount $img $mnt"
mount_demo
grep -F " $mnt " /proc/mounts

say "cp -a $sample $mnt/"
start=$SECONDS
timeout 900 cp -a "$sample" "$mnt/"
echo "copied in $((SECONDS - start)) s"
(cd "$sample" && timeout 600 find . -type f -print0 | sort -z |
    xargs -0 -r timeout 600 sha256sum) >"$sums"
echo "$(wc -l <"$sums") files summed at the source"

say "tux3 sync $mnt (sync(1) does not reach a FUSE server; this commits now)"
timeout 120 "$TUX3" sync "$mnt"

say "I/O counters of the mount server after the copy and the sync"
show_counters

say "unmount and mount again (the files now come from the volume)"
unmount_demo
mount_demo

say "sha256 of every file through the mount"
(cd "$mnt/$(basename "$sample")" && timeout 900 sha256sum --quiet --strict -c "$sums")
echo "all $(wc -l <"$sums") files match the source"

say "df -h $mnt"
df -h "$mnt"

say "I/O counters of the mount server since the remount (the checksum pass)"
show_counters

say "tux3 umount $mnt"
unmount_demo

say "tux3 fsck $img"
timeout 300 "$TUX3" fsck "$img"

say "tux3 dump $img (summary: each section's first lines)"
timeout 300 "$TUX3" dump "$img" | awk '/^[^ ]/ { print; n = 3; next } n > 0 { print; n-- }'

say "tux3 graph $img -o $demo/volume.svg --max-nodes 120"
timeout 300 "$TUX3" graph "$img" -o "$demo/volume.svg" --max-nodes 120
ls -l "$demo/volume.svg"

say "done"
echo "image: $img ($(du -h "$img" | cut -f1) used of 4G, sparse); graph: $demo/volume.svg"
