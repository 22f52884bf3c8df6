#!/usr/bin/env bash
# For the next device call (written in session 37, whose two H200 starts were refused; not yet run): the
# graph_speedup tables two issues still owe, on an H200, from one build of graph_speedup alone (-O1, about 200 s):
#   TABLES="44": issue 44's rows at the final code (b4 640: D-FINE-n fp32 and fp16, RT-DETR-r18 fp16, DEIM-n fp32)
#     and RF-DETR-n (b4, its default size), eager / graph / step, each arm its own process; the issue asks
#     step <= 1.3x kernel busy (session 33 measured 1.10-1.17 on an H100).
#   TABLES="38": issue 38's largest size of each detection family at its default precision, b8 640 (the DETR
#     line b4), eager / graph / step (step where the family has it).
#   TABLES="40": issue 40's RF-DETR-n and -s at b4 640 AMP, ours (the original's step beside it is
#     benchmarks/fidelity/original_step.py's job, not this script's).
# TABLES="44 38" (default) runs those two; about 12 s per arm for the small models, more for the large ones, so 38 needs
# a second call on the warm machine: poll with benchmarks/s31/poll.sh (the build is kept in build-cuda).
#   cp -a . /tmp/s38 && cd /tmp/s38 && (COMMIT=... setsid bash benchmarks/s37/gs_tables.sh > /tmp/s38_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s38_driver.log DRIVER_OUT=/tmp/s38out WAIT=<s> PERIOD=15 bash /tmp/s38/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=${OUT_DIR:-/tmp/s38out}
driver_start
driver_deps
if [ ! -x build-cuda/benchmarks/graph_speedup/graph_speedup ]; then
  t0=$(date +%s)
  timeout 330 scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=ON \
    -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- graph_speedup > $OUT/build.log 2>&1
  echo "build: rc=$? in $(( $(date +%s) - t0 )) s $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -10
fi
# gs TAG "MODEL:BATCH[:IMGSZ] PRECISION" ...: all three arms of each entry, one table per tag.
gs() {
  local tag=$1 e
  shift
  for e in "$@"; do
    set -- $e
    MODELS="$1" PRECISIONS="$2" ARMS="eager graph step" timeout 240 benchmarks/graph_speedup/run.sh build-cuda \
      $OUT/gs_${tag}_${1%%:*}_$2.jsonl > $OUT/gs_${tag}_${1%%:*}_$2.txt 2>&1
    echo "graph_speedup $tag $1 $2 rc=$? $(date -u +%T)"; grep -A1 "^model" $OUT/gs_${tag}_${1%%:*}_$2.txt | tail -1
  done
}
for t in ${TABLES:-44 38}; do
  case $t in
    44) gs 44 "dfinen:4:640 fp32" "dfinen:4:640 fp16" "rtdetr-r18:4:640 fp16" "deimn:4:640 fp32" "rfdetr-n:4 fp16" ;;
    40) gs 40 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16" ;;
    38) gs 38 "yolo9c:8:640 fp16" "yoloxx:8:640 fp16" "rtmdetx:8:640 fp16" "yolonasl:8:640 fp32" "yolo7b:8:640 fp16" \
          "rtdetr-r101:4:640 fp16" "rtdetrv2-r101:4:640 fp16" "rtdetrv4x:4:640 fp32" "dfinex:4:640 fp32" "deimx:4:640 fp32" \
          "deimv2x:4:640 fp16" "ec-x:4:640 fp16" "rfdetr-l:4 fp16" ;;
  esac
done
echo "driver done $(date -u +%FT%TZ)"
