#!/usr/bin/env bash
# Session 21, device call A at the final commit (carry .deps): gpu_suites.sh's build (tests, CLI,
# graph_speedup; -O1), then the GPU suites of the areas EC's capture fix touches first: kit (every family's
# 10-step graph-vs-eager case, EC's failed at 9f627d3), capture, dfine_net. Call B runs the other areas.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIBREYOLO_GPU_OPT=${LIBREYOLO_GPU_OPT:--O1} BUILD_TIMEOUT=${BUILD_TIMEOUT:-300} bash benchmarks/gpu_suites.sh build
AREAS="kit capture dfine_net" SUITE_TIMEOUT=${SUITE_TIMEOUT:-330} bash benchmarks/gpu_suites.sh suites
