#!/usr/bin/env bash
# The one read-only gate: formatting, the pure core's dependencies, docs,
# lints, then the tests README.md names. CI runs this; so can you.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

echo "== $(date -u +%T) cargo fmt --check"
cargo fmt --all -- --check

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

# Clippy is the workspace's compiler for the test build, as `cargo clippy`
# makes it for a check: every target is linted (warnings denied) as it is
# built for the tests, and the dependencies are built once, where a check
# for clippy and then a build for the tests took two minutes more on two
# cores. The tests reuse that build, so they run with the same settings.
export RUSTC_WORKSPACE_WRAPPER
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
if [ ! -x "$RUSTC_WORKSPACE_WRAPPER" ]; then
    echo "clippy is not installed (rustup component add clippy)" >&2
    exit 1
fi
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
echo "== $(date -u +%T) clippy, and the test build"
cargo test --workspace --all-targets --no-run --locked

echo "== $(date -u +%T) tests"
cargo test --workspace --locked
