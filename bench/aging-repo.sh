#!/bin/bash
# bench/aging-repo.sh: the repository with a long history that bench/aging.sh
# ages filesystems with, made once and cached: every published version of an
# npm package (default date-fns: 187 versions up to its latest release; the
# later ones some 4,000-6,600 files, 5-22 MiB, consecutive versions
# differing in hundreds to thousands of files), in semantic-version order
# (pre-releases before their release) up to the registry's `latest` tag,
# committed into a bare git repository, one commit per version, tagged
# v<version>. The tarballs come from the npm registry
# (https://registry.npmjs.org/PACKAGE, the only network this needs) and are
# deleted once imported; the repository is kept in $AGING_CACHE (default
# ~/.cache/tux3-bench) so a re-run downloads nothing. Commits carry fixed
# names and dates: the same versions make the same commits on any machine.
#
# Usage: bench/aging-repo.sh [PACKAGE]     prints the repository's path
set -u
PKG=${1:-${AGING_PKG:-date-fns}}
CACHE=${AGING_CACHE:-$HOME/.cache/tux3-bench}
NAME=$(echo "$PKG" | tr '/@' '__')
REPO=$CACHE/$NAME.git
if [ -f "$REPO/complete" ]; then
    echo "$REPO"
    exit 0
fi
mkdir -p "$CACHE"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/aging-repo.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "aging-repo: fetching the version list of $PKG" >&2
curl -sfL --retry 3 "https://registry.npmjs.org/$PKG" -o "$TMP/packument.json" || {
    echo "aging-repo: cannot reach the npm registry for $PKG" >&2; exit 1; }
# version and tarball URL, in semantic-version order, up to dist-tags.latest
python3 - "$TMP/packument.json" > "$TMP/list" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
def key(v):
    m = re.match(r"(\d+)\.(\d+)\.(\d+)(?:-([^+]*))?", v)
    core = tuple(int(x) for x in m.group(1, 2, 3))
    pre = m.group(4)
    if pre is None:
        return core + (1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.]", pre))
    return core + (0, parts)
vs = sorted(d["versions"], key=key)
latest = d.get("dist-tags", {}).get("latest")
if latest in vs:
    vs = vs[:vs.index(latest) + 1]
for v in vs:
    print(v, d["versions"][v]["dist"]["tarball"])
PY
N=$(wc -l < "$TMP/list")

# Stage 1: every version's tree, imported into $REPO.tmp (kept across an
# interrupted build: versions already imported are not downloaded again).
[ -d "$REPO.tmp" ] || git init -q --bare "$REPO.tmp" || exit 1
TREES=$REPO.tmp/trees
touch "$TREES"
W=$TMP/work
mkdir "$W" "$TMP/tgz"
i=0
while read -r v url; do
    i=$((i + 1))
    grep -q "^$v " "$TREES" && continue
    f=$TMP/tgz/$(basename "$url")
    curl -sfL --retry 3 -o "$f" "$url" || { echo "aging-repo: cannot download $url" >&2; exit 1; }
    find "$W" -mindepth 1 -delete
    tar xzf "$f" -C "$W" --strip-components=1 --no-same-owner \
        || { echo "aging-repo: cannot unpack $v" >&2; exit 1; }
    chmod -R u+rwX "$W"
    rm "$f"
    rm -f "$REPO.tmp/index"
    git --git-dir="$REPO.tmp" --work-tree="$W" add -A -f . || exit 1
    t=$(git --git-dir="$REPO.tmp" write-tree) || exit 1
    echo "$v $t" >> "$TREES"
    [ $((i % 20)) = 0 ] && echo "aging-repo: $i/$N imported" >&2
done < "$TMP/list"

# Stage 2: the history, one commit per version in order.
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost GIT_COMMITTER_NAME=bench \
    GIT_COMMITTER_EMAIL=bench@localhost GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" \
    GIT_COMMITTER_DATE="2000-01-01T00:00:00Z"
parent=
while read -r v url; do
    t=$(grep "^$v " "$TREES" | tail -1 | cut -d' ' -f2)
    [ -n "$t" ] || { echo "aging-repo: no tree for $v" >&2; exit 1; }
    c=$(echo "$PKG $v" | git --git-dir="$REPO.tmp" commit-tree "$t" ${parent:+-p "$parent"}) || exit 1
    git --git-dir="$REPO.tmp" tag -f "v$v" "$c" >/dev/null || exit 1
    parent=$c
done < "$TMP/list"
git --git-dir="$REPO.tmp" update-ref refs/heads/master "$parent" || exit 1
git --git-dir="$REPO.tmp" symbolic-ref HEAD refs/heads/master || exit 1
rm -f "$REPO.tmp/index"
git --git-dir="$REPO.tmp" gc -q --prune=now || exit 1
echo "$PKG: $N versions, $(head -1 "$TMP/list" | cut -d' ' -f1) to $(tail -1 "$TMP/list" | cut -d' ' -f1)" > "$REPO.tmp/complete"
rm -rf "$REPO"
mv "$REPO.tmp" "$REPO"
echo "aging-repo: $REPO ($(du -sh "$REPO" | cut -f1)), $(cat "$REPO/complete")" >&2
echo "$REPO"
