#!/usr/bin/env bash
# tests/bench/snapshots.sh — snapshot and clone sources on the local cluster
# (kube-sandbox), release builds: one claim of the CSI class holding MIB MiB
# (default 512) copied with --copy-method direct, snapshot and clone, beside
# rsync -a of the same tree. Needs root, as the test suite.
#
#   tests/bench/snapshots.sh [MIB]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VOLMIG_BENCH_MIB="${1:-512}" \
    cargo test --release -q -p kubectl-volmig --test snapshots_bench \
    -- --ignored --nocapture --test-threads 1
