#!/usr/bin/env bash
# Session 32's second device call (carry .deps; COMMIT= the commit under test), after every AdamW form took the
# capturable arithmetic (the step equals eager bit for bit) and the step GPU suite's DETR arms were poisoned on
# part B's loss too:
#   1. benchmarks/gpu_suites.sh build (-O1);
#   2. issue 44's protocol timed arms alone on the GPU: D-FINE-n cuda_graph=true, then cuda_graph=step (seed 0);
#   3. beside the GPU suites of step, capture and kit: cuda_graph=step seed 1 and eager seeds 0 and 1 (the mAP arms).
#   cp -a . /tmp/s32 && cd /tmp/s32 && (COMMIT=... setsid bash benchmarks/s32/second.sh > /tmp/s32_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s32_driver.log DRIVER_OUT=/tmp/s32out WAIT=<s> bash /tmp/s32/benchmarks/s32/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s32out; mkdir -p $OUT/runs
echo "second start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CLI=build-cuda/tools/libreyolo
timeout 180 $CLI data synth --task detect --out /tmp/shapes_0 --images 400 --imgsz 640 --classes 8 --seed 0 > $OUT/runs/synth.log 2>&1
echo "set written rc=$? $(date -u +%T)"
arm() {  # arm NAME SECONDS KEY=VALUE...
  local n=$1 secs=$2; shift 2; local t0=$(date +%s.%N)
  timeout $secs $CLI train model=dfinen data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
    project=/tmp/runs name=$n exist_ok=true "$@" > $OUT/runs/$n.log 2>&1
  local rc=$? t1=$(date +%s.%N)
  echo "arm $n rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(grep -o '"mAP50-95":[0-9.]*' $OUT/runs/$n.log | tail -1)"
  grep -E "cuda_graph=step:|cuda_graph: " $OUT/runs/$n.log | tail -2
  cp /tmp/runs/$n/results.csv $OUT/runs/$n.results.csv 2>/dev/null
}
arm graph_s0 300 seed=0 multi_scale=false cuda_graph=true
arm step_s0 300 seed=0 multi_scale=false cuda_graph=step
echo "protocol timed arms done $(date -u +%T)"
( arm step_s1 300 seed=1 multi_scale=false cuda_graph=step; arm eager_s0 400 seed=0 multi_scale=false cuda_graph=false
  arm eager_s1 400 seed=1 multi_scale=false cuda_graph=false ) > $OUT/runs/beside.txt 2>&1 &
AREAS="step capture kit" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
wait; cat $OUT/runs/beside.txt
echo "driver done $(date -u +%FT%TZ)"
