#!/usr/bin/env bash
# Session 22, device call A at the final code commit (carry .deps): gpu_suites.sh's build (tests, CLI,
# graph_speedup; -O1), then the GPU suites of the areas this session's change reaches first: kit (every
# family's graph-vs-eager and capture cases), deimv2, dfine, train. Call C runs the other areas.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIBREYOLO_GPU_OPT=${LIBREYOLO_GPU_OPT:--O1} BUILD_TIMEOUT=${BUILD_TIMEOUT:-330} bash benchmarks/gpu_suites.sh build
AREAS="kit deimv2 dfine train" SUITE_TIMEOUT=${SUITE_TIMEOUT:-240} bash benchmarks/gpu_suites.sh suites
