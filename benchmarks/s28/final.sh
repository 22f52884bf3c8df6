#!/usr/bin/env bash
# Session 28's closing device run, on one fresh machine (carry .deps; COMMIT= the commit under test):
#   cp -a . /tmp/s28 && cd /tmp/s28 && (COMMIT=... setsid bash benchmarks/s28/final.sh > /tmp/s28_driver.log 2>&1 < /dev/null &)
# read with `LOG=/tmp/s28_driver.log DRIVER_OUT=/tmp/s28out bash /tmp/s28/benchmarks/s24/poll.sh`.
#   1. benchmarks/gpu_suites.sh build (tests, CLI, graph_speedup; -O1);
#   2. issue 42: `profile infer yolo9t` at batch 1, 640 px, eager and graphed, with --trace 20 (kernels per forward
#      and their busy time: the floor under a replay), at four settings, one after another on the idle GPU:
#      fp32 NCHW (today's default), + --cudnn-benchmark, --half --channels-last --cudnn-benchmark, --half;
#   3. the GPU suites: kit and capture first (RF-DETR's network capture after this session's fix; the infer trace
#      case), then every other area.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s28out; mkdir -p $OUT
echo "final start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
CLI=build-cuda/tools/libreyolo
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
if [ -x $CLI ]; then
  i=0
  for flags in "" "--cudnn-benchmark" "--half --channels-last --cudnn-benchmark" "--half"; do
    i=$((i + 1))
    echo "infer arm $i: ${flags:-fp32 NCHW}" >> $OUT/infer.txt
    timeout 120 $CLI profile infer yolo9t --batch 1 --imgsz 640 --device cuda --cuda-graph --repeat 100 --warmup 10 --trace 20 $flags \
      --json > $OUT/infer_$i.json 2>> $OUT/infer.txt
  done
  echo "infer done $(date -u +%T)"
fi
AREAS="kit capture" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "kit+capture done $(date -u +%T)"
rest=$(for d in tests/*/; do a=$(basename $d); [ "$a" = kit ] || [ "$a" = capture ] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
echo "driver done $(date -u +%FT%TZ)"
