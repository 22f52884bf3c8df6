#!/usr/bin/env bash
# Session 38's device driver (an H200; carry .deps and .orig: the original at c41461e under .orig/libreyolo, cocoapi's
# Python files under .orig/cocoapi). Longer than one call: poll it across calls on the warm machine.
#   1. graph_speedup and the CLI, one build at -O1.
#   2. Issue 44's step table at the final code: D-FINE-n b4 640 fp32 and fp16, RT-DETR-r18 b4 fp16, DEIM-n b4 fp32;
#      eager / graph / step, each arm its own process.
#   3. Issue 40's table: RF-DETR-n and -s b4 640 fp16 (eager / graph / step), then the original's own eager step of
#      both on the same GPU (benchmarks/fidelity/original_step.py; multi_scale=false, so one fixed 640 batch).
#   4. Issue 40's accuracy: RF-DETR-n, ours and the original side by side on the earlier families' protocol
#      (STYLE=shapes: `data synth --task detect --images 400 --imgsz 640 --classes 8 --seed 0`, from scratch,
#      10 epochs, batch 4, no_aug_epochs=2, each library's defaults otherwise).
#   5. If the calls last: issue 38's largest sizes (the rows of s37's gs_tables.sh, which this replaced; removed).
#   cp -a . /tmp/s38 && cd /tmp/s38 && (COMMIT=... setsid bash benchmarks/s38/call.sh > /tmp/s38_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s38_driver.log DRIVER_OUT=/tmp/s38out WAIT=<s> PERIOD=15 bash /tmp/s38/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s38out
driver_start
. benchmarks/fidelity/common.sh   # .deps unpacked and on the paths; $L logs, pack, synth_set, $CLI
t0=$(date +%s)
timeout 450 scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=ON \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- graph_speedup libreyolo_cli > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s (-O1) $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -10
# gs (device_lib.sh) at the 240 s this call ran it under.
export GS_TIMEOUT=240
gs 44 "dfinen:4:640 fp32" "dfinen:4:640 fp16" "rtdetr-r18:4:640 fp16" "deimn:4:640 fp32"
gs 40 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16"
for m in rfdetr-n rfdetr-s; do
  STYLE=shapes synth_set /tmp/shapes_0 0
  PYTHONUNBUFFERED=1 timeout 180 python3 benchmarks/fidelity/original_step.py .orig $m /tmp/shapes_0/data.yaml /tmp/ostep/$m \
    batch=4 imgsz=640 workers=4 epochs=10 no_aug_epochs=2 eval_interval=0 multi_scale=false > $L/ostep_$m.log 2>&1
  echo "original_step $m rc=$? $(date -u +%T)"; grep '^{"model"' $L/ostep_$m.log | tee -a $OUT/orig_speed.jsonl || tail -5 $L/ostep_$m.log
  pack
done
STYLE=shapes SKIP_BUILD=1 SEEDS=0 ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh rfdetr-n
echo "side_by_side done $(date -u +%T)"
gs 38 "yolo9c:8:640 fp16" "yoloxx:8:640 fp16" "rtmdetx:8:640 fp16" "yolonasl:8:640 fp32" "yolo7b:8:640 fp16" \
  "rtdetr-r101:4:640 fp16" "rtdetrv2-r101:4:640 fp16" "rtdetrv4x:4:640 fp32" "dfinex:4:640 fp32" "deimx:4:640 fp32" \
  "deimv2x:4:640 fp16" "ec-x:4:640 fp16" "rfdetr-l:4 fp16"
echo "driver done $(date -u +%FT%TZ)"
