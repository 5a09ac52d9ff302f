#!/usr/bin/env bash
# Tests the Python client (clients/python): installs it with its test extra into a venv kept in
# $STRATA_TOOLS_DIR (default ~/.cache/strata-tools, as scripts/services.sh keeps its tools), runs
# its pytest suite against a real `strata dev` the tests start from $STRATA_BIN (default
# target/debug/strata, which scripts/test.sh builds first), then its linters (ruff, mypy --strict).
# Exits non-zero when any of them fails; runs the linters even when a test failed.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=${STRATA_TOOLS_DIR:-$HOME/.cache/strata-tools}
VENV=$TOOLS/python-client
export STRATA_BIN=${STRATA_BIN:-${CARGO_TARGET_DIR:-target}/debug/strata}

log() { echo "python-client: $*" >&2; }

apt_install() {
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if [ ! -x "$VENV/bin/python" ]; then
    command -v python3 >/dev/null || apt_install python3 python3-venv
    mkdir -p "$TOOLS"
    python3 -m venv "$VENV" 2>/dev/null || { rm -rf "$VENV"; apt_install python3-venv; python3 -m venv "$VENV"; }
fi
# pip rebuilds a local directory on every install, so the venv always tests this checkout.
"$VENV/bin/pip" install -q --disable-pip-version-check "./clients/python[test]"

status=0
(cd clients/python && "$VENV/bin/python" -m pytest -q -p no:cacheprovider) || status=$?
(cd clients/python && "$VENV/bin/ruff" check --no-cache . && "$VENV/bin/ruff" format --no-cache --check .) || status=1
(cd clients/python && "$VENV/bin/mypy" --cache-dir "$VENV/mypy-cache" src tests benchmarks) || status=1
exit "$status"
