#!/usr/bin/env bash
# tests/bench/many.sh — several claims in one operation on the local cluster
# (kube-sandbox), release builds: CLAIMS claims (default 8) of MIB MiB (default
# 256) copied by one `migrate` with --parallel 1, then with --parallel 4, beside
# rsync -a of the same trees one after the other. Needs root, as the test suite.
#
#   tests/bench/many.sh [CLAIMS] [MIB]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VOLMIG_BENCH_CLAIMS="${1:-8}" VOLMIG_BENCH_MIB="${2:-256}" \
    cargo test --release -q -p kubectl-volmig --test many_bench \
    -- --ignored --nocapture --test-threads 1
