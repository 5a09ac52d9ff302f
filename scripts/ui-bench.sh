#!/usr/bin/env bash
# Times the inspector page on a long session (tests/ui/bench.mjs): first paint of a session's
# page, the whole timeline loaded page by page, scrolling through it, with the timeline windowed
# and with every row kept in the page. Builds the release `strata` unless $STRATA_BIN names
# one; installs Chromium and the npm packages as scripts/ui-tests.sh does. EVENTS=N sets the
# session's length (default 10,000).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${STRATA_BIN:-}" ]; then
    cargo build --release -p strata-cli
    export STRATA_BIN=${CARGO_TARGET_DIR:-target}/release/strata
fi
command -v node >/dev/null && [ -x /usr/bin/chromium ] || {
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium nodejs npm >/dev/null
}
(cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
cd tests/ui && exec node bench.mjs
