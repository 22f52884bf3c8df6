#!/usr/bin/env bash
# Session 30's first device call (carry .deps; COMMIT= the commit under test): session 29's code had run on no
# GPU. Build; graph_speedup's eager and graph arms for D-FINE-n and RT-DETR-r18 at b4 640 fp32/fp16 (issue 44's
# DETR step after steps 1-3: the fixed-shape criterion); then the GPU suites that train DETR steps or graphs
# (dfine_net, kit, capture), then those unreached since 76aa321 (step train trainer yolo9 yolonas yolov7 yolox).
#   cp -a . /tmp/s30 && cd /tmp/s30 && (COMMIT=... setsid bash benchmarks/s30/first.sh > /tmp/s30_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s30_driver.log DRIVER_OUT=/tmp/s30out bash /tmp/s30/benchmarks/s24/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s30out; mkdir -p $OUT
echo "first start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
MODELS="dfinen:4:640 rtdetr-r18:4:640" PRECISIONS="fp32 fp16" ARMS="eager graph" \
  timeout 300 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_detr.jsonl > $OUT/graph_speedup_detr.txt 2>&1
echo "graph_speedup done $(date -u +%T)"; tail -12 $OUT/graph_speedup_detr.txt
AREAS="dfine_net kit capture" bash benchmarks/gpu_suites.sh suites
echo "detr areas done $(date -u +%T)"
AREAS="step train trainer yolo9 yolonas yolov7 yolox" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
