#!/usr/bin/env bash
# Session 33's closing device call (carry .deps; COMMIT= the commit under test):
#   1. benchmarks/gpu_suites.sh build (-O1);
#   2. every area's GPU suite at the final commit (capture first: its new D-FINE-line region cases, the diagnosis of the
#      conformance suite's DEIMv2 graph check; then step, kit, dfine_net, then the rest);
#   3. beside them, issue 44's protocol mAP at seeds 4-7 (eager and cuda_graph=step; the set and keys of driver.sh),
#      to add to driver.sh's seeds 0-3; and issue 38's larger sizes on the same protocol beside the small ones, each at
#      its family's defaults (seed 0; batch 8, D-FINE 4): YOLOv9-c and -t, YOLOX-l and -t, D-FINE-s (D-FINE-n: the
#      eager seeds). Wall times share the GPU with the suites: not comparable.
#   cp -a . /tmp/s33f && cd /tmp/s33f && (COMMIT=... setsid bash benchmarks/s33/final.sh > /tmp/s33f_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s33f_driver.log DRIVER_OUT=/tmp/s33fout WAIT=<s> bash /tmp/s33f/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s33fout; mkdir -p $OUT/runs
echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
nvidia-smi --query-gpu=name --format=csv,noheader
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CLI=build-cuda/tools/libreyolo
timeout 180 $CLI data synth --task detect --out /tmp/shapes_0 --images 400 --imgsz 640 --classes 8 --seed 0 > $OUT/runs/synth.log 2>&1
echo "set written rc=$? $(date -u +%T)"
arm() {  # arm NAME MODEL BATCH KEY=VALUE... (driver.sh's protocol keys)
  local n=$1 m=$2 b=$3; shift 3; local t0=$(date +%s)
  timeout 420 $CLI train model=$m data=/tmp/shapes_0/data.yaml epochs=10 batch=$b imgsz=640 workers=4 no_aug_epochs=2 \
    multi_scale=false project=/tmp/runs name=$n exist_ok=true "$@" > $OUT/runs/$n.log 2>&1
  echo "arm $n rc=$? wall_s=$(( $(date +%s) - t0 )) $(grep -o '"mAP50-95":[0-9.]*' $OUT/runs/$n.log | tail -1)"
  grep -E "cuda_graph=step: [0-9]+ of" $OUT/runs/$n.log | tail -1 | cut -c1-200
  cp /tmp/runs/$n/results.csv $OUT/runs/$n.results.csv 2>/dev/null
}
( for s in 4 5 6 7; do arm step_s$s dfinen 4 seed=$s cuda_graph=step; done ) > $OUT/runs/lane1.txt 2>&1 &
( for s in 4 5 6 7; do arm eager_s$s dfinen 4 seed=$s cuda_graph=false; done ) > $OUT/runs/lane2.txt 2>&1 &
( arm yolo9c_s0 yolo9c 8 seed=0; arm yolo9t_s0 yolo9t 8 seed=0 ) > $OUT/runs/lane3.txt 2>&1 &
( arm yoloxl_s0 yoloxl 8 seed=0; arm yoloxt_s0 yoloxt 8 seed=0; arm dfines_s0 dfines 4 seed=0 ) > $OUT/runs/lane4.txt 2>&1 &
first="capture step kit dfine_net"
AREAS="$first" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "first areas done $(date -u +%T)"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "suites done $(date -u +%T)"
wait; cat $OUT/runs/lane*.txt
echo "driver done $(date -u +%FT%TZ)"
