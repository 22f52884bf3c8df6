#!/usr/bin/env bash
# Session 33's device call (carry .deps; COMMIT= the commit under test), each stage stamped:
#   1. benchmarks/gpu_suites.sh build (every test, the CLI, graph_speedup; -O1);
#   2. graph_speedup eager / graph / step at b4 640, alone on the GPU: D-FINE-n fp32 and fp16, RT-DETR-r18 fp16,
#      DEIM-n fp32 (issue 44's table at the final optimizer code);
#   3. issue 44's protocol mAP, more seeds (D-FINE-n on the shapes set: data synth --images 400 --imgsz 640
#      --classes 8 --seed 0; 10 epochs, batch 4, no_aug_epochs=2, multi_scale=false), in two lanes beside the GPU
#      suites: eager (cuda_graph=false) seeds 0-3, cuda_graph=step seeds 0-3, and the step path without graphs
#      (cuda_graph=step cuda_graph_warmup=1000000: padding, segments, device optimizer and EMA, no replay) seeds 0-1.
#      Wall times of these arms share the GPU and are not comparable; the mAP is what they are for.
#   4. every area's GPU suite (step, dfine_net, kit, capture first).
#   cp -a . /tmp/s33 && cd /tmp/s33 && (COMMIT=... setsid bash benchmarks/s33/driver.sh > /tmp/s33_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s33_driver.log DRIVER_OUT=/tmp/s33out WAIT=<s> bash /tmp/s33/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s33out; mkdir -p $OUT/runs
echo "driver start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
nvidia-smi --query-gpu=name --format=csv,noheader
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
CLI=build-cuda/tools/libreyolo
gs() {  # gs TAG MODEL PRECISIONS SECONDS
  MODELS="$2" PRECISIONS="$3" ARMS="eager graph step" \
    timeout $4 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_$1.jsonl > $OUT/graph_speedup_$1.txt 2>&1
  echo "graph_speedup $1 rc=$? $(date -u +%T)"; tail -4 $OUT/graph_speedup_$1.txt
}
gs dfine dfinen:4:640 "fp32 fp16" 200
gs rtdetr rtdetr-r18:4:640 fp16 120
gs deim deimn:4:640 fp32 120
timeout 180 $CLI data synth --task detect --out /tmp/shapes_0 --images 400 --imgsz 640 --classes 8 --seed 0 > $OUT/runs/synth.log 2>&1
echo "set written rc=$? $(date -u +%T)"
arm() {  # arm NAME KEY=VALUE...
  local n=$1; shift; local t0=$(date +%s)
  timeout 500 $CLI train model=dfinen data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=4 no_aug_epochs=2 \
    multi_scale=false project=/tmp/runs name=$n exist_ok=true "$@" > $OUT/runs/$n.log 2>&1
  echo "arm $n rc=$? wall_s=$(( $(date +%s) - t0 )) $(grep -o '"mAP50-95":[0-9.]*' $OUT/runs/$n.log | tail -1)"
  grep -E "cuda_graph=step: [0-9]+ of" $OUT/runs/$n.log | tail -1 | cut -c1-200
  cp /tmp/runs/$n/results.csv $OUT/runs/$n.results.csv 2>/dev/null
}
S="cuda_graph=step"; N="cuda_graph=step cuda_graph_warmup=1000000"; E="cuda_graph=false"
( for s in 0 1 2 3; do arm step_s$s seed=$s $S; done; arm eager_s3 seed=3 $E; arm nograph_s1 seed=1 $N ) > $OUT/runs/lane1.txt 2>&1 &
( for s in 0 1 2; do arm eager_s$s seed=$s $E; done; arm nograph_s0 seed=0 $N ) > $OUT/runs/lane2.txt 2>&1 &
AREAS="step dfine_net kit capture" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "detr areas done $(date -u +%T)"
first="step dfine_net kit capture"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "suites done $(date -u +%T)"
wait; cat $OUT/runs/lane1.txt $OUT/runs/lane2.txt
echo "driver done $(date -u +%FT%TZ)"
