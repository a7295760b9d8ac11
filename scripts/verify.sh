#!/usr/bin/env bash
# The one read-only gate: formatting, lints, the pure core's dependencies,
# docs, then the tests README.md names. CI runs this; so can you.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== locktable stays free of I/O runtimes"
if cargo tree -p locktable -e normal --prefix none | grep -Eq '^(tokio|mio|async-std|smol) '; then
    echo "locktable must not depend on an async runtime:" >&2
    cargo tree -p locktable -e normal >&2
    exit 1
fi

echo "== cargo doc"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked --quiet

echo "== tests"
cargo test --workspace --locked
