#!/usr/bin/env bash
# tests/bench/clusters.sh — copies into another cluster on two local clusters
# (kube-sandbox): one claim of MIB MiB (default 1024) copied within one
# cluster, then into the other over each network path (--network
# loadbalancer, nodeport, tunnel), release builds, on loopback. Prints MiB/s per
# path. Needs root (the sandbox's kubelets use mount namespaces), as the
# test suite does.
#
#   tests/bench/clusters.sh [MIB]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
VOLMIG_BENCH_MIB="${1:-1024}" cargo test --release -q -p kubectl-volmig --test clusters_bench \
    -- --ignored --nocapture --test-threads 1
