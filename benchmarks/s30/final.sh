#!/usr/bin/env bash
# Session 30's device call (carry .deps; COMMIT= the commit under test), in priority order, each stage stamped:
#   1. benchmarks/gpu_suites.sh build (tests, CLI, graph_speedup; -O1);
#   2. the step area's two new GPU cases (issue 44's segmented step: its machinery bit for bit; D-FINE-n fp32/AMP
#      and RT-DETR-r18 AMP against the graph-less path);
#   3. graph_speedup eager / graph / step at b4 640: D-FINE-n fp32 and fp16, RT-DETR-r18 fp16, then DEIM-n fp32;
#   4. the GPU suites of step (all of it), dfine_net, kit and capture, then every other area.
#   cp -a . /tmp/s30 && cd /tmp/s30 && (COMMIT=... setsid bash benchmarks/s30/final.sh > /tmp/s30_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s30_driver.log DRIVER_OUT=/tmp/s30out bash /tmp/s30/benchmarks/s24/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=/tmp/s30out; mkdir -p $OUT
echo "final start $(date -u +%FT%TZ) COMMIT=${COMMIT:-unknown}"
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-480} bash benchmarks/gpu_suites.sh build
echo "build stage done $(date -u +%T)"
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
# The new cases first (the segmented step), then graph_speedup, then the suites.
timeout 420 build-cuda/tests/libreyolo_tests --test-suite=gpu --source-file="*/tests/step/*" \
  --test-case="*segmented step graph*,*D-FINE-n (fp32 and AMP)*" > $OUT/gpu_step_detr.txt 2>&1
echo "step detr cases: rc=$? $(grep -E '^\[doctest\] test cases' $OUT/gpu_step_detr.txt) $(date -u +%T)"
grep -E "MESSAGE|ERROR|CHECK|fell back|replayed|spread|graph vs|step graph" $OUT/gpu_step_detr.txt | head -60
MODELS="dfinen:4:640" PRECISIONS="fp32 fp16" ARMS="eager graph step" \
  timeout 200 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_dfine.jsonl > $OUT/graph_speedup_dfine.txt 2>&1
MODELS="rtdetr-r18:4:640" PRECISIONS="fp16" ARMS="eager graph step" \
  timeout 120 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_rtdetr.jsonl > $OUT/graph_speedup_rtdetr.txt 2>&1
echo "graph_speedup done $(date -u +%T)"; tail -8 $OUT/graph_speedup_dfine.txt; tail -5 $OUT/graph_speedup_rtdetr.txt
MODELS="deimn:4:640" PRECISIONS="fp32" ARMS="eager graph step" \
  timeout 120 benchmarks/graph_speedup/run.sh build-cuda $OUT/graph_speedup_deim.jsonl > $OUT/graph_speedup_deim.txt 2>&1
echo "graph_speedup deim done $(date -u +%T)"; tail -5 $OUT/graph_speedup_deim.txt
AREAS="step dfine_net kit capture" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "detr areas done $(date -u +%T)"
first="step dfine_net kit capture"
rest=$(for d in tests/*/; do a=$(basename $d); [[ " $first " == *" $a "* ]] || printf '%s ' $a; done)
AREAS="$rest" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "driver done $(date -u +%FT%TZ)"
