#!/usr/bin/env bash
# Tests the inspector page (/ui) end to end: installs Debian's Chromium when it is missing and
# the test's npm packages (tests/ui, from its lock file), then drives Chromium headless with
# playwright-core against a real `strata dev` started from $STRATA_BIN (default
# target/debug/strata, which scripts/test.sh builds first). Screenshots are kept in
# $STRATA_UI_SCREENSHOTS (default <target dir>/ui-screenshots) for a person to look at.
set -euo pipefail
cd "$(dirname "$0")/.."

export STRATA_BIN=${STRATA_BIN:-${CARGO_TARGET_DIR:-target}/debug/strata}
export STRATA_UI_SCREENSHOTS=${STRATA_UI_SCREENSHOTS:-${CARGO_TARGET_DIR:-target}/ui-screenshots}

log() { echo "ui-tests: $*" >&2; }

if [ ! -x /usr/bin/chromium ]; then
    log "installing Debian's chromium"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v npm >/dev/null; then
    log "installing Node.js and npm"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
(cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
cd tests/ui && exec node --test --test-reporter=spec
