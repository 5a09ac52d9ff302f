#!/usr/bin/env bash
# Runs Strata's whole test suite: formatting, lints, and every test of the workspace.
#
# Needs only the Rust toolchain (rustup's cargo with rustfmt and clippy). The suite runs on the
# embedded backends (file log, SQLite, in-process hot state, local blobs); nothing else to install.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "==> cargo fmt --check"
cargo fmt --all --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "==> cargo test"
cargo test --workspace --locked
