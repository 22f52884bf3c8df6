#!/usr/bin/env bash
# Session 27's planned first device call (no machine was lent in session 27): benchmarks/s26/final.sh (build, every
# area's GPU suite, RF-DETR-n beside the original) with VALCHECK=1, which adds the original's YOLOv9-t and YOLOX-t
# lanes on the scenes set (seeds 0-1), ours beside them: our `val` of each of its checkpoints beside its own validator's, after
# fidelity rows 17, 18 and 20 (on this CPU the committed YOLOv9-t checkpoint now agrees to 1e-15). Same use:
#   cp -a . /tmp/s26f && cd /tmp/s26f && (COMMIT=... setsid bash benchmarks/s27/final.sh > /tmp/s26f_driver.log 2>&1 < /dev/null &)
# then `LOG=/tmp/s26f_driver.log DRIVER_OUT=/tmp/s26fout benchmarks/s24/poll.sh`.
VALCHECK=1 exec bash "$(dirname "$0")/../s26/final.sh"
