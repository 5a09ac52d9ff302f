#!/usr/bin/env bash
# Fuzzes the Avro decoder, the canonical event parser and the file-log recovery (fuzz/, with
# cargo-fuzz and libFuzzer) for FUZZ_SECONDS each (default 60), starting from the committed seed
# corpus under fuzz/corpus/<target>; what a run learns goes to a scratch corpus, never into the
# checkout. Installs cargo-fuzz when missing. Runs on the stable toolchain (`--sanitizer none`:
# Rust's own checks, debug assertions and overflow checks catch what ASan would in safe code).
# Exits non-zero on the first crash, with the input that caused it under $FUZZ_ARTIFACTS.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-"avro_decode event_json file_log_recovery"}
# Its own target directory: the sanitizer-coverage build shares nothing with the main one.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-target}/fuzz}
ARTIFACTS=${FUZZ_ARTIFACTS:-${CARGO_TARGET_DIR}/artifacts}

log() { echo "fuzz: $*" >&2; }

if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz 0.13.2 from crates.io"
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
mkdir -p "$ARTIFACTS"
for target in $TARGETS; do
    scratch=$(mktemp -d)
    log "$target: ${SECONDS_PER_TARGET} s from $(ls "fuzz/corpus/$target" | wc -l) seeds"
    status=0
    cargo fuzz run --sanitizer none -O "$target" "$scratch" "fuzz/corpus/$target" -- \
        -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$ARTIFACTS/$target-" -print_final_stats=1 \
        >"$ARTIFACTS/$target.log" 2>&1 || status=$?
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$ARTIFACTS/$target.log" | grep -o '[0-9]*$' || true)
    log "$target: ${runs:-?} executions, corpus $(ls "$scratch" | wc -l) inputs, exit $status"
    rm -rf "$scratch"
    if [ "$status" -ne 0 ]; then
        tail -40 "$ARTIFACTS/$target.log" >&2
        log "$target found a crash: the input is in $ARTIFACTS (add it to the target's regression tests)"
        exit "$status"
    fi
done
