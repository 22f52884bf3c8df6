#!/usr/bin/env bash
# Session 21, device call C on the warm machine (carry .deps and .orig, the original's c41461e package):
# issue 39's accuracy protocol for DEIMv2-atto and EC-s, ours and the original's own trainer on the same set
# and GPU (benchmarks/fidelity/lanes.sh with STYLE=shapes: data synth --task detect --images 400 --imgsz 640
# --classes 8 --seed 0; from scratch, 10 epochs, batch 4, no_aug_epochs=2, each library's default precision),
# two lanes side by side (their wall times are each pair's under the same shared load).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
STYLE=shapes SEEDS=0 SKIP_BUILD=1 LANE_TIMEOUT=${LANE_TIMEOUT:-560} ARM_TIMEOUT=${ARM_TIMEOUT:-275} \
  bash benchmarks/fidelity/lanes.sh deimv2atto ec-s
