#!/usr/bin/env bash
# Fuzz the tux3 engine: builds the seed corpus if missing, replays the saved
# reproducers (fuzz/regressions/NAME.TARGET.bin), runs each target
# (open_image, fsck_image, replay_log, resealed_image) for SECONDS/4 (default
# total 600 s) in libFuzzer's fork mode (a crash is saved and fuzzing goes
# on), then prints per target the executions and the crashes found, each with
# its panic line.
# Exits non-zero if any target crashed or a reproducer still crashes.
# Usage: fuzz/run.sh [SECONDS]   (env: FUZZ_TARGETS, FUZZ_JOBS, FUZZ_BUILD_FLAGS)
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$HOME/.cargo/bin:$PATH"

total=${1:-600}
read -r -a targets <<<"${FUZZ_TARGETS:-open_image fsck_image replay_log resealed_image}"
each=$(( total / ${#targets[@]} ))
(( each > 0 )) || each=1
# No sanitizer: over MemDevice the engine is safe Rust (bounds are checked and
# panic). Debug assertions and overflow checks on, as in the engine's tests.
read -r -a build_flags <<<"${FUZZ_BUILD_FLAGS:--s none -a}"
bin=target/x86_64-unknown-linux-gnu/release

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
if [[ ! -d corpus/open_image || ! -d corpus/fsck_image || ! -d corpus/replay_log ]]; then
    cargo run --release --example make-corpus
fi

# The panic line of one crashing input (or what libFuzzer said).
why() {
    "$bin/$1" -timeout=10 -rss_limit_mb=2048 "$2" 2>&1 |
        grep -m1 -A1 'panicked at\|memory allocation\|ERROR: libFuzzer' | grep -v 'stack backtrace' | tr '\n' ' ' | cut -c1-200
}

status=0
declare -A execs found known
for t in "${targets[@]}"; do
    cargo +nightly fuzz build "${build_flags[@]}" "$t"
    mkdir -p "artifacts/$t" "corpus/$t" logs
    known[$t]=0
    for r in regressions/*."$t".bin; do
        [[ -e $r ]] || continue
        if ! "$bin/$t" -timeout=10 -rss_limit_mb=2048 "$r" >/dev/null 2>&1; then
            known[$t]=$(( known[$t] + 1 )); status=1
            echo "still crashes: $r: $(why "$t" "$r")"
        fi
    done
    before=$(find "artifacts/$t" -type f | sort)
    log="logs/$t.log"
    echo "== $t: ${each}s (log: fuzz/$log)"
    # resealed_image takes short edit scripts; 64 KiB and more is a whole
    # image (its regressions' form), which open_image covers already.
    maxlen=262144
    [[ $t == resealed_image ]] && maxlen=4096
    cargo +nightly fuzz run "${build_flags[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$each" -timeout=10 -rss_limit_mb=2048 -max_len="$maxlen" \
        -fork="${FUZZ_JOBS:-1}" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
        >"$log" 2>&1 || status=1
    execs[$t]=$(grep -o '^#[0-9]*: cov.*exec/s: [0-9]*' "$log" | tail -1 |
        sed 's/^#\([0-9]*\):.*exec\/s: \([0-9]*\)/\1 (\2\/s)/' || true)
    found[$t]=$(comm -13 <(echo "$before") <(find "artifacts/$t" -type f | sort) | grep . || true)
done

echo
echo "summary (${each}s per target)"
for t in "${targets[@]}"; do
    n=$(grep -c . <<<"${found[$t]}" || true)
    printf '  %-11s %s executions, %s new crash artifact(s), %s known reproducer(s) still crashing\n' \
        "$t" "${execs[$t]:-?}" "$n" "${known[$t]}"
    for a in ${found[$t]}; do
        status=1
        echo "    fuzz/$a: $(why "$t" "$a")"
    done
done
exit $status
