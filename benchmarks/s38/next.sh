#!/usr/bin/env bash
# For the next session's device call (written in session 38, not yet run): what issues 38 and 40 still need from a GPU.
#   1. Issue 38, YOLOX-l: the original's own YOLOX-l beside ours on the earlier families' protocol (STYLE=shapes,
#      seed 0, 10 epochs, batch 8, no_aug_epochs=2), and YOLOX-t beside it, so that session 33's 0.067 (YOLOX-l)
#      against 0.372 (YOLOX-t) is either the recipe's (the original's YOLOX-l as slow) or ours.
#   2. Issue 40, RF-DETR-n: ours and the original side by side once more at the accumulation semantics of session 38
#      (train/accumulation.hpp), seeds 0 and 1, so the comparison has a second seed.
# About 190 s of build, then 4-5 minutes per pair of runs: poll across calls.
#   cp -a . /tmp/s39 && cd /tmp/s39 && (COMMIT=... setsid bash benchmarks/s38/next.sh > /tmp/s39_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s39_driver.log DRIVER_OUT=/tmp/out WAIT=<s> PERIOD=15 bash /tmp/s39/benchmarks/s31/poll.sh   (carry .deps, .orig)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
driver_start
. benchmarks/fidelity/common.sh
build_cuda 330 libreyolo_cli
STYLE=shapes SKIP_BUILD=1 SEEDS=0 ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh yoloxl yoloxt
echo "yolox done $(date -u +%T)"
STYLE=shapes SKIP_BUILD=1 SEEDS="0 1" ARM_TIMEOUT=420 bash benchmarks/fidelity/side_by_side.sh rfdetr-n
echo "driver done $(date -u +%FT%TZ)"
