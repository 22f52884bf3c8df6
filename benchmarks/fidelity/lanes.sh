#!/usr/bin/env bash
# side_by_side.sh for several (model, seed) pairs at once, one lane each, on one CUDA machine: the CLI built
# once, each seed's scenes set written once, then every lane runs ours and then the original (as
# side_by_side.sh does) in the background. The lanes share the GPU and the CPU cores, so their wall times
# are each pair's under the same shared load, not a lone run's.
#   OUT=dir SEEDS="0 1" LANE_TIMEOUT=500 benchmarks/fidelity/lanes.sh MODEL...   (.deps and .orig carried)
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/fidelity/common.sh
[ "${SKIP_BUILD:-0}" = 1 ] || build_cuda ${BUILD_TIMEOUT:-300} libreyolo_cli
for seed in ${SEEDS:-0}; do
  synth_set /tmp/${STYLE:-scenes}_$seed $seed &
done
wait
for seed in ${SEEDS:-0}; do
  for m in "$@"; do
    SKIP_BUILD=1 SEEDS=$seed timeout ${LANE_TIMEOUT:-500} benchmarks/fidelity/side_by_side.sh $m > $L/lane_${m}_$seed.txt 2>&1 &
  done
done
wait
cat $L/lane_*.txt
pack
