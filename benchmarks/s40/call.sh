#!/usr/bin/env bash
# Session 40's device driver (carry .deps and .orig: the original at c41461e under .orig/libreyolo, cocoapi's Python
# files under .orig/cocoapi). Longer than one call: poll it across calls on the warm machine.
#   1. benchmarks/gpu_suites.sh's build (every test, the CLI, graph_speedup) at -O1.
#   2. The step area's GPU suite first (up to 600 s): its accumulation case, corrected after session 39's run stopped
#      it on a wrong micro-batch count before its bit-equality checks, has not run on a GPU yet.
#   3. Issue 40: RF-DETR-n and -s b4 640 AMP (eager / graph / step, each arm its own process), then the original's own
#      eager step of both (benchmarks/fidelity/original_step.py, multi_scale=false: one fixed 640 batch), in this
#      call, so the ratios compare one machine.
#   4. Every other area's GPU suite (kit: the LingBot case's new yardstick, parameters and the losses' ulp floor).
#   5. RF-DETR-n trained with cuda_graph=step and cuda_graph_max_graphs=24 (shapes set, seed 0): how much device
#      memory each further step graph takes under multi-scale, and how many steps replay, beside session 39's 4-graph
#      run (0.2562, 73.4 s, 137 of 800 replayed).
#   6. Issue 40's accuracy, a second seed: RF-DETR-n, ours and the original side by side (shapes set, seed 1).
# (As run at 8309b6f the two suite stages and the original_step loop were spelled out; driver_suites,
# device_lib.sh, and orig_step, fidelity/common.sh, replaced them after.)
#   cp -a . /tmp/s40 && cd /tmp/s40 && (COMMIT=... setsid bash benchmarks/s40/call.sh > /tmp/s40_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s40_driver.log DRIVER_OUT=/tmp/s40out WAIT=<s> PERIOD=15 bash /tmp/s40/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s40out
driver_start
driver_build
driver_suites AREAS=step
. benchmarks/fidelity/common.sh   # $L, pack, synth_set, $CLI
export GS_TIMEOUT=240
gs 40 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16"
STYLE=shapes synth_set /tmp/shapes_0 0
orig_step /tmp/shapes_0/data.yaml rfdetr-n rfdetr-s
pack
driver_suites SKIP_AREAS=step
t0=$(date +%s.%N)
timeout 240 $CLI train model=rfdetr-n data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
  seed=0 eval_interval=10 cuda_graph=step cuda_graph_max_graphs=24 project=/tmp/ours name=rfdetr-n_step24 exist_ok=true \
  > $OUT/ours_rfdetr-n_step24.log 2>&1
rc=$?; t1=$(date +%s.%N)
echo "rfdetr-n cuda_graph=step max_graphs=24 rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(date -u +%T)"
grep -E "captured|cache|replayed|done:|Error|error" $OUT/ours_rfdetr-n_step24.log | cut -c1-220 | tail -30
nvidia-smi --query-gpu=memory.total --format=csv,noheader
pack
STYLE=shapes SKIP_BUILD=1 SEEDS=1 ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh rfdetr-n
echo "driver done $(date -u +%FT%TZ)"
