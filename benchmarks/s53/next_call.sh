#!/usr/bin/env bash
# Planned first device call of the next session (carry .deps .orig; `git rev-parse --short HEAD > .head` first):
# benchmarks/s51/call.sh with
#   ARMS: the original's side of issue 39 where ours ran alone in session 53 (DEIMv2-s seeds 3-4, EC-s seed 1), EC-s at
#     seed 2 on both sides, DEIMv2-atto at seeds 3-4 on both sides (more seeds for its -0.002 of session 46);
#   AREAS: capture first (session 51's lockstep case, mended in a329295 and never run to its end on a GPU), then the
#     areas not run since 634494f.
# The original's arms are the long ones (~300 s alone for DEIMv2-s): expect a second, polling call on the warm machine
# with the command in benchmarks/s51/call.sh's header.
cd "$(dirname "$0")/../.."
export ARMS=${ARMS:-"deimv2s:3:original:shapes deimv2s:4:original:shapes ec-s:1:original:shapes ec-s:2:original:shapes \
ec-s:2:ours:shapes deimv2atto:3:ours:shapes deimv2atto:4:ours:shapes deimv2atto:3:original:shapes deimv2atto:4:original:shapes"}
export AREAS=${AREAS-"capture step detect_data data yolo9 train dfine_net rtdetr"}
exec bash benchmarks/s51/call.sh
