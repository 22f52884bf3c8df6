#!/usr/bin/env bash
# Session 29 wrote this for the next device call (session 29 had no device: loans were paused). On one fresh
# machine (carry .deps; COMMIT= the commit under test):
#   cp -a . /tmp/s29 && cd /tmp/s29 && (COMMIT=... setsid bash benchmarks/s29/final.sh > /tmp/s29_driver.log 2>&1 < /dev/null &)
# read with `LOG=/tmp/s29_driver.log DRIVER_OUT=/tmp/s29out bash /tmp/s29/benchmarks/s24/poll.sh`.
#   1. benchmarks/gpu_suites.sh build (tests, CLI, graph_speedup; -O1);
#   2. the GPU suites of the areas no run has reached since 76aa321 (step, train, trainer, yolo9, yolonas,
#      yolov7, yolox), then those session 29 touched (the DETR set losses in fixed shapes, denoising from
#      device scalars, profile infer's cuDNN flag: rtdetr, dfine, dfine_net, deimv2, capture, kit);
#   3. graph_speedup's eager and graph arms for D-FINE-n and RT-DETR-r18 at b4 640, fp32 and fp16: the DETR step
#      with the fixed-shape criterion against its kernel busy time (issue 44's "before": D-FINE-n fp32 48.5 /
#      40.7 ms against 14.9 ms busy, RT-DETR-r18 fp16 50.5 / 36.3 against 14.7, an earlier call);
#   4. every other area's suite.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s29out; mkdir -p $OUT
echo "final start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
first="step train trainer yolo9 yolonas yolov7 yolox"
touched="rtdetr dfine dfine_net deimv2 capture kit"
AREAS="$first" bash benchmarks/gpu_suites.sh suites
echo "unreached areas done $(date -u +%T)"
AREAS="$touched" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "touched areas done $(date -u +%T)"
MODELS="dfinen:4:640 rtdetr-r18:4:640" PRECISIONS="fp32 fp16" ARMS="eager graph" \
  timeout 300 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_detr.jsonl > $OUT/graph_speedup_detr.txt 2>&1
echo "graph_speedup done $(date -u +%T)"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first $touched " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
echo "driver done $(date -u +%FT%TZ)"
