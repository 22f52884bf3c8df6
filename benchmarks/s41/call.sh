#!/usr/bin/env bash
# The next session's device driver, written in session 40 (carry .deps and .orig; make .orig with
# benchmarks/fidelity/prepare_orig.sh). Meant for main after branch `step-graph-one-stream` is merged (its two
# commits: every step graph recorded on one side stream; a step graph recorded only while the device keeps room
# for it). Longer than one call: poll it across calls on the warm machine (benchmarks/s31/poll.sh). In order of need:
#   1. benchmarks/gpu_suites.sh's build at -O1.
#   2. The step and capture areas' GPU suites: the branch's capture changes; the capture area's three-eager
#      yardstick (ddc5fa9, never run on a GPU).
#   (Session 41 order: 4, 5, 3, 6.)
#   3. RF-DETR-n trained on the shapes set, seed 0 (its recipe: 11 multi-scale sizes, accumulate 4), three arms in
#      one call: eager, cuda_graph=step with the default 4 graphs, and cuda_graph_max_graphs=24. Session 40 (before
#      the branch): each further graph reserved 2.2-4.0 GB and the 19th ran out of the H100's memory. The question:
#      how much each graph reserves now, how many micro-batches replay, the wall time against eager.
#   4. Issue 40 in one call: graph_speedup RF-DETR-n and -s (b4 640 AMP) and the original's own step
#      (original_step.py), which session 40's call lost to a wrong .orig layout.
#   5. Every other area's GPU suite (kit: the parameter check's narrowing, LingBot's first-difference message).
#   6. Issue 40's accuracy, seed 1: RF-DETR-n beside the original (ours 0.2157 in 75.6 s in session 40).
#   cp -a . /tmp/s41 && cd /tmp/s41 && (COMMIT=... setsid bash benchmarks/s41/call.sh > /tmp/s41_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s41_driver.log DRIVER_OUT=/tmp/s41out WAIT=<s> PERIOD=15 bash /tmp/s41/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s41out
driver_start
driver_build
driver_suites AREAS="step capture"
. benchmarks/fidelity/common.sh   # $L, pack, synth_set, $CLI
STYLE=shapes synth_set /tmp/shapes_0 0
# Issue 40 in one call: ours eager and graphed beside the original's own step, same GPU.
export GS_TIMEOUT=240
gs 40 "rfdetr-n:4:640 fp16" "rfdetr-s:4:640 fp16"
orig_step /tmp/shapes_0/data.yaml rfdetr-n rfdetr-s
pack
driver_suites SKIP_AREAS="step capture"
pack
# Session 41 dropped the default-4-graphs arm (device budget): eager against 24 step graphs on one stream.
for arm in "eager cuda_graph=false" "step24 cuda_graph=step cuda_graph_max_graphs=24"; do
  set -- $arm
  name=$1; shift
  t0=$(date +%s.%N)
  timeout 240 $CLI train model=rfdetr-n data=/tmp/shapes_0/data.yaml epochs=10 batch=4 imgsz=640 workers=8 no_aug_epochs=2 \
    seed=0 eval_interval=10 "$@" project=/tmp/ours name=rfdetr-n_$name exist_ok=true > $OUT/ours_rfdetr-n_$name.log 2>&1
  rc=$?; t1=$(date +%s.%N)
  echo "rfdetr-n $name rc=$rc wall_s=$(python3 -c "print(round($t1-$t0,1))") $(date -u +%T)"
  grep -E "captured|cache|memory|replayed|done:|WARNING" $OUT/ours_rfdetr-n_$name.log | cut -c1-220 | tail -30
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
done
pack
STYLE=shapes SKIP_BUILD=1 SEEDS=1 ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh rfdetr-n
echo "driver done $(date -u +%FT%TZ)"
