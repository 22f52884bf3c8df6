#!/usr/bin/env bash
# Session 38, the last device call (about 350 s of budget left): RF-DETR-n on the earlier families' protocol once more,
# ours only, after the accumulation change (train/accumulation.hpp: windows within each epoch, each micro-batch's
# loss divided by its window's length, as the original); the first call's run (old accumulation) and the original's
# run are in RESULTS.md, session 38. Validation at epoch 10 only (eval_interval=10) to fit the budget.
#   COMMIT=... bash benchmarks/s38/rfdetr_acc.sh   (carry .deps)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
driver_start
. benchmarks/fidelity/common.sh
t0=$(date +%s)
timeout 230 scripts/build-cuda.sh build-cuda -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_BENCHMARKS=OFF \
  -DLIBREYOLO_BUILD_EXAMPLES=OFF "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" -- libreyolo_cli > $OUT/build.log 2>&1
echo "build: rc=$? in $(( $(date +%s) - t0 )) s (-O1) $(date -u +%T)"; grep -E "error:|FAILED" $OUT/build.log | head -10
STYLE=shapes synth_set /tmp/shapes_0 0
t0=$(date +%s.%N)
timeout 200 $CLI train model=rfdetr-n data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
  seed=0 eval_interval=10 project=/tmp/ours name=rfdetr-n_acc exist_ok=true > $OUT/ours_rfdetr-n_acc.log 2>&1
rc=$?; t1=$(date +%s.%N)
echo "rfdetr-n (new accumulation) rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))")"
grep -E "^libreyolo train|^epoch|metrics" $OUT/ours_rfdetr-n_acc.log | cut -c1-300
echo "driver done $(date -u +%FT%TZ)"
