#!/usr/bin/env bash
# Acceptance check of `tux3 mkfs --from`: copy a host directory tree into a
# fresh sparse 4G image, then require that
#   - `tux3 fsck` finds the volume clean (exit 0),
#   - `tux3 ls -R --paths` lists exactly what `find` lists,
#   - every regular file reads back byte-identical (`tux3 cat | cmp`),
#   - every symlink has the same target (`tux3 readlink`).
# Prints a summary and exits non-zero on any mismatch.
#
# Usage: scripts/check-import.sh SRC_DIR
# The binary is $TUX3 if set, else target/release/tux3, else target/debug/tux3.
set -euo pipefail
export LC_ALL=C

usage() { echo "usage: $0 SRC_DIR" >&2; exit 2; }
die() { echo "check-import: $*" >&2; exit 2; }

[ $# -eq 1 ] || usage
src=$1
[ -d "$src" ] || die "$src: not a directory"
src=$(cd "$src" && pwd -P)

repo=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${TUX3:-}" ]; then
    if [ -x "$repo/target/release/tux3" ]; then
        TUX3=$repo/target/release/tux3
    elif [ -x "$repo/target/debug/tux3" ]; then
        TUX3=$repo/target/debug/tux3
    else
        die "no tux3 binary: run 'cargo build --release' or set TUX3"
    fi
fi
[ -x "$TUX3" ] || die "$TUX3: not an executable"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tux3-check-import.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
img=$tmp/import.img

echo "== mkfs --from $src"
if ! "$TUX3" mkfs --size 4G --from "$src" "$img"; then
    die "mkfs failed"
fi

echo "== fsck"
rc=0
"$TUX3" fsck "$img" || rc=$?
[ "$rc" -eq 0 ] || die "fsck exited $rc (expected 0: clean)"

echo "== listing"
"$TUX3" ls -R --paths "$img" / | sort > "$tmp/image.list" || die "tux3 ls failed"
(cd "$src" && find . -mindepth 1 | sed 's|^\./||' | sort) > "$tmp/host.list"
entries=$(wc -l < "$tmp/host.list")
listing_diffs=0
if ! diff -u "$tmp/host.list" "$tmp/image.list" > "$tmp/list.diff"; then
    listing_diffs=$(tail -n +3 "$tmp/list.diff" | grep -c '^[-+]' || true)
    echo "listing differs (- host, + image):"
    head -40 "$tmp/list.diff"
fi

echo "== regular files"
# One line per file, "ok" or "differs: PATH"; files are checked in batches
# by parallel workers, each running `tux3 cat IMG /PATH | cmp - SRC/PATH`.
compare_files() {
    set -o pipefail
    local rel
    for rel in "$@"; do
        rel=${rel#./}
        if "$TUX3" cat "$img" "/$rel" | cmp -s - "$src/$rel"; then
            echo ok
        else
            echo "differs: $rel"
        fi
    done
}
export -f compare_files
export TUX3 img src
jobs=$(nproc 2>/dev/null || echo 2)
(cd "$src" && find . -type f -print0) |
    xargs -0 -r -n 64 -P "$jobs" bash -c 'compare_files "$@"' compare_files > "$tmp/files.out"
files=$(wc -l < "$tmp/files.out")
identical=$(grep -cx ok "$tmp/files.out" || true)
mismatches=$((files - identical))
grep -v -x ok "$tmp/files.out" | head -20 || true

echo "== symlinks"
links=0 link_mismatches=0
while IFS= read -r -d '' rel; do
    rel=${rel#./}
    links=$((links + 1))
    want=$(readlink "$src/$rel")
    if ! got=$("$TUX3" readlink "$img" "/$rel") || [ "$got" != "$want" ]; then
        link_mismatches=$((link_mismatches + 1))
        [ "$link_mismatches" -gt 20 ] || echo "symlink differs: $rel"
    fi
done < <(cd "$src" && find . -type l -print0)

echo "entries: $entries, listing differences: $listing_diffs"
echo "symlinks: $links, mismatches: $link_mismatches"
echo "files: $files, identical: $identical, mismatches: $mismatches"
if [ "$listing_diffs" -ne 0 ] || [ "$mismatches" -ne 0 ] || [ "$link_mismatches" -ne 0 ]; then
    echo "check-import: FAILED" >&2
    exit 1
fi
echo "check-import: OK"
