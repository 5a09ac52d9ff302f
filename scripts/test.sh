#!/usr/bin/env bash
# Runs Strata's whole test suite: formatting, lints, and every test of the workspace, the
# distributed backends included, against real servers (PostgreSQL, Redis, an S3-compatible
# server) that scripts/services.sh installs when missing and starts on loopback. They are
# stopped when this script exits, whatever happened. Then a bounded fuzzing run of the decoders
# and the file-log recovery (scripts/fuzz.sh), the Python client's tests against a real
# `strata dev` (scripts/python-client.sh), and the inspector page's in Chromium against another
# (scripts/ui-tests.sh).
#
# Needs the Rust toolchain and root (for apt-get and to run PostgreSQL as its own user).
# Set STRATA_SKIP_SERVICES=1 to run without the servers (the distributed tests then skip,
# saying why; in CI, where CI is set, they fail instead).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo fmt --check"
cargo fmt --all --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

log=$(mktemp)
pylog=$(mktemp)
uilog=$(mktemp)
cleanup() {
    rm -f "$log" "$pylog" "$uilog"
    if [ "${STRATA_SKIP_SERVICES:-0}" != 1 ]; then
        scripts/services.sh stop || true
    fi
}
trap cleanup EXIT

if [ "${STRATA_SKIP_SERVICES:-0}" != 1 ]; then
    echo "==> starting PostgreSQL, Redis and S3 (moto)"
    scripts/services.sh start
    # shellcheck disable=SC1090
    source "${STRATA_SERVICES_DIR:-/tmp/strata-services}/env"
fi

echo "==> cargo test"
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

echo "==> fuzzing (scripts/fuzz.sh: ${FUZZ_SECONDS:-60} s per target)"
set +e
scripts/fuzz.sh
fuzz_status=$?
set -e

echo "==> python client (clients/python)"
set +e
# A no-op when cargo test already built it; the client's tests start this binary.
cargo build --locked --bin strata &&
    STRATA_BIN="${CARGO_TARGET_DIR:-target}/debug/strata" scripts/python-client.sh 2>&1 | tee "$pylog"
py_status=${PIPESTATUS[0]}
set -e

echo "==> inspector page (tests/ui, Chromium)"
set +e
STRATA_BIN="${CARGO_TARGET_DIR:-target}/debug/strata" scripts/ui-tests.sh 2>&1 | tee "$uilog"
ui_status=${PIPESTATUS[0]}
set -e

# One closing line for the whole suite: cargo prints one per test binary, pytest one more, and
# node's test runner its own counts.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;/) p += $i; if ($(i+1) ~ /^failed;/) f += $i } }
     FILENAME == ARGV[2] && /^=* ?[0-9]+ [a-z]+(, [0-9]+ [a-z]+)* in [0-9.]+s/ {
         for (i = 1; i < NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^(failed|errors?)/) f += $i }
     }
     FILENAME == ARGV[3] && /^[^ ]+ pass [0-9]+$/ { p += $3 }
     FILENAME == ARGV[3] && /^[^ ]+ fail [0-9]+$/ { f += $3 }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log" "$pylog" "$uilog"
if [ "$status" -ne 0 ]; then exit "$status"; fi
if [ "$fuzz_status" -ne 0 ]; then exit "$fuzz_status"; fi
if [ "$py_status" -ne 0 ]; then exit "$py_status"; fi
exit "$ui_status"
