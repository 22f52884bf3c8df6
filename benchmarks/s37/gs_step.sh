#!/usr/bin/env bash
# Session 37, issue 44's table at the final code on an H200 (session 33 ran it on an H100): graph_speedup's step
# arm only (its step_over_busy is the issue's "step <= 1.3x kernel busy"; the eager and graph arms did not fit the
# session's last 7 device minutes), b4 640 for the issue's four rows, then RF-DETR-n (b4, its default size), whose
# cuda_graph=step landed in sessions 34-36. Built alone at -O1.
#   cp -a . /tmp/s37g && cd /tmp/s37g && (COMMIT=... setsid bash benchmarks/s37/gs_step.sh > /tmp/s37g_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s37gout
driver_start
driver_deps
t0=$(date +%s)
timeout 300 scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- graph_speedup > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -10
for entry in "dfinen:4:640 fp32" "dfinen:4:640 fp16" "rtdetr-r18:4:640 fp16" "deimn:4:640 fp32" "rfdetr-n:4 fp16"; do
  set -- $entry
  MODELS="$1" PRECISIONS="$2" ARMS="step" timeout 120 benchmarks/graph_speedup/run.sh build-cuda $OUT/gs_${1%%:*}_$2.jsonl \
    > $OUT/gs_${1%%:*}_$2.txt 2>&1
  echo "step arm $1 $2 rc=$? $(date -u +%T): $(python3 -c 'import json,sys;r=json.loads(open(sys.argv[1]).readline());print("step", round(r["step_ms_min"],2), "ms, busy", round(r["gpu_busy_ms"],2), "ms, step/busy", round(r["step_over_busy"],3), "replayed", r["capture"]["replayed_steps"], "VRAM", round(r["peak_vram_mb"]), "MB")' $OUT/gs_${1%%:*}_$2.jsonl 2>&1 | tail -1)"
done
echo "driver done $(date -u +%FT%TZ)"
