#!/usr/bin/env bash
# Session 39's device driver (carry .deps, and .orig for the optional last stage). Longer than one call: poll it
# across calls on the warm machine.
#   1. benchmarks/gpu_suites.sh's build (every test, the CLI, graph_speedup) at -O1.
#   2. The step area's GPU suite first (up to 600 s): its new cases are cuda_graph=step under gradient accumulation
#      and YOLOv7-b's step graphs (its loss made fixed-shape this session).
#   3. Issue 40 / 38: RF-DETR-n, -s (b4 640) and -l (b4, its 704) under AMP, eager / graph / step, each arm its own
#      process; once stepping every batch (graph_speedup's default) and once as the recipe runs them, nbs=16 at
#      batch 4 = windows of 4 micro-batches (--accumulate 4: per micro-batch times; the step arm runs the trainer's
#      accumulating and stepping step graphs).
#      Issue 38: YOLOv7-b b8 640 fp16, whose step arm is now the whole step.
#   4. Every other area's GPU suite.
#   5. RF-DETR-n trained end to end with cuda_graph=step on the earlier families' protocol (shapes set, seed 0,
#      10 epochs, batch 4, no_aug_epochs=2): the trainer's step graphs under accumulation and multi-scale, beside
#      session 38's eager 0.2651 at 6fdaf30 (H100).
#   6. Issue 40: where RF-DETR-n's and -s's eager steps spend their time (--detail).
#   7. If the calls last: issue 38's YOLOX-l beside the original's (benchmarks/s38/next.sh's first stage).
#   cp -a . /tmp/s39 && cd /tmp/s39 && (COMMIT=... setsid bash benchmarks/s39/call.sh > /tmp/s39_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s39_driver.log DRIVER_OUT=/tmp/s39out WAIT=<s> PERIOD=15 bash /tmp/s39/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s39out
driver_start
driver_build
SUITE_TIMEOUT=600 AREAS="step" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
grep -E "TEST CASE|ERROR|MESSAGE" /tmp/gpu_areas/gpu_step.txt | cut -c1-300 | head -40
echo "step suite done $(date -u +%T)"
. benchmarks/fidelity/common.sh   # $L, pack, synth_set, $CLI
gs 40 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16" "rfdetr-l:4 fp16"
gs 38 "yolo7b:8:640 fp16"
EXTRA="--accumulate 4 --warmup 5 --steps 8" gs 40acc4 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16" "rfdetr-l:4 fp16"
SKIP_AREAS="step" bash benchmarks/gpu_suites.sh suites
cp /tmp/gpu_areas/*.txt $OUT/ 2>/dev/null
echo "suites done $(date -u +%T)"
STYLE=shapes synth_set /tmp/shapes_0 0
t0=$(date +%s.%N)
timeout 240 $CLI train model=rfdetr-n data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
  seed=0 eval_interval=10 cuda_graph=step project=/tmp/ours name=rfdetr-n_step exist_ok=true > $OUT/ours_rfdetr-n_step.log 2>&1
rc=$?; t1=$(date +%s.%N)
echo "rfdetr-n cuda_graph=step rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(date -u +%T)"
grep -E "^libreyolo train|^epoch|metrics|cuda_graph|captur" $OUT/ours_rfdetr-n_step.log | cut -c1-300 | tail -30
pack
# Issue 40: why RF-DETR-n's eager step (96 ms in session 38) is slower than -s's (82 ms) with fewer kernels: where
# each eager step's time goes (--detail 15: the largest entries per list).
for m in rfdetr-n rfdetr-s; do
  timeout 120 build-cuda/benchmarks/graph_speedup/graph_speedup --arm eager --model $m --batch 4 --imgsz 640 --precision fp16 \
    --detail 15 --state /tmp/detail_$m.state > $OUT/detail_eager_$m.json 2> $OUT/detail_eager_$m.err
  echo "detail eager $m rc=$? $(date -u +%T)"; python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d[k] for k in ('step_ms_min','step_ms_median','gpu_busy_ms','kernels_per_step')})" $OUT/detail_eager_$m.json
done
STYLE=shapes SKIP_BUILD=1 SEEDS=0 ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh yoloxl
echo "driver done $(date -u +%FT%TZ)"
