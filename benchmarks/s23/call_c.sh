#!/usr/bin/env bash
# Session 23, device call C on the warm machine (build-cuda kept; carry .deps): every area's GPU suite at the
# submitted commit (benchmarks/gpu_suites.sh suites).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SUITE_TIMEOUT=${SUITE_TIMEOUT:-150} COMMIT=${COMMIT:-unknown} bash benchmarks/gpu_suites.sh suites
