#!/usr/bin/env bash
# The engine's layers (crates/engine/src/lib.rs, DESIGN.md section 5), kept
# true: every `crate::MODULE` path in a module's code (comments aside) must
# name a module of its own layer or one below it. Exits 1 and names each
# file:line that imports from above.
#   scripts/check-layers.sh [ENGINE_SRC]   (default crates/engine/src)
set -euo pipefail
src="${1:-$(dirname "$0")/../crates/engine/src}"

# Rank of each top-level module: higher may import lower, never the reverse.
declare -A rank=(
    [types]=0 [codec]=0 [error]=0 [memory_budget]=0
    [device]=1 [log]=2 [structures]=3 [cache]=4
    [backend]=5 [frontend]=6 [api]=7
)

bad=0
while IFS= read -r -d '' file; do
    rel="${file#"$src"/}"
    mod="${rel%%/*}"
    mod="${mod%.rs}"
    [[ "$mod" == lib ]] && continue
    own="${rank[$mod]:-}"
    if [[ -z "$own" ]]; then
        echo "check-layers: $rel: module '$mod' has no layer (add it to scripts/check-layers.sh)" >&2
        bad=1
        continue
    fi
    # Code lines only: drop // comments (doc links may point anywhere);
    # `crate::{a::X, b}` names a and b.
    while IFS=: read -r line target; do
        theirs="${rank[$target]:-}"
        if [[ -z "$theirs" ]]; then
            continue # a crate-root item (re-export), not a layer
        fi
        if (( theirs > own )); then
            echo "check-layers: $rel:$line: '$mod' imports from '$target', a layer above it" >&2
            bad=1
        fi
    done < <(perl -ne 's{//.*}{};
        while (/crate::(\{[^}]*\}?|[a-z_]+)/g) {
            my $m = $1;
            if ($m =~ /^\{/) { print "$.:$1\n" while $m =~ /(?:^\{|,)\s*([a-z_]+)/g }
            else { print "$.:$m\n" }
        }' "$file")
done < <(find "$src" -name '*.rs' -print0)

if (( bad )); then
    echo "check-layers: the engine's layers are crossed (see crates/engine/src/lib.rs)" >&2
    exit 1
fi
echo "check-layers: every engine module imports only from its layer or below"
