#!/usr/bin/env bash
# tests/bench/cutover.sh — the cutover's downtime on the local cluster (kube-sandbox):
# a claim of GIB GiB (default 1) with an app writing on it, `migrate --cutover`,
# release builds. Prints the rounds, the final sync and the downtime. Needs root
# (the sandbox's kubelets use mount namespaces), as the test suite does.
#
#   tests/bench/cutover.sh [GIB]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VOLMIG_BENCH_GIB="${1:-1}" cargo test --release -q -p kubectl-volmig --test cutover_bench \
    -- --ignored --nocapture --test-threads 1
