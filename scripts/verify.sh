#!/usr/bin/env bash
# The one read-only gate: formatting, lints, the pure core's dependencies,
# docs, then the tests README.md names. CI runs this; so can you.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

echo "== $(date -u +%T) cargo fmt --check"
cargo fmt --all -- --check

echo "== $(date -u +%T) cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "== $(date -u +%T) locktable and the protocol stay free of I/O runtimes"
for pure in locktable leasehold-protocol; do
    if cargo tree -p "$pure" -e normal --prefix none | grep -Eq '^(tokio|mio|async-std|smol|reqwest|hyper|axum) '; then
        echo "$pure must not depend on an async runtime or a network stack:" >&2
        cargo tree -p "$pure" -e normal >&2
        exit 1
    fi
done

echo "== $(date -u +%T) cargo doc"
RUSTDOCFLAGS=-Dwarnings cargo doc --workspace --no-deps --locked --quiet

echo "== $(date -u +%T) tests"
cargo test --workspace --locked
