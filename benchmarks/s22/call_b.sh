#!/usr/bin/env bash
# Session 22, device call B on call A's warm machine (build-cuda kept; carry .deps and .orig, the original's
# c41461e package): issue 39's accuracy protocol for DEIMv2-atto (after this session's schedule and
# sanitize change) and DEIMv2-s, ours and the original's own trainer on the same set and GPU
# (benchmarks/fidelity/lanes.sh with STYLE=shapes: data synth --task detect --images 400 --imgsz 640
# --classes 8 --seed 0; from scratch, 10 epochs, batch 4, no_aug_epochs=2, each library's default
# precision), two lanes side by side (each pair's wall times under the same shared load).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STYLE=shapes SEEDS=0 SKIP_BUILD=1 LANE_TIMEOUT=${LANE_TIMEOUT:-570} ARM_TIMEOUT=${ARM_TIMEOUT:-330} \
  bash benchmarks/fidelity/lanes.sh deimv2atto deimv2s
