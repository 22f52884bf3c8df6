#!/usr/bin/env bash
# Session 7's closing device call, most important first (a call that runs out of time still returns
# the logs packed so far): build; GPU tests of the family kit, capture and profiler; `val` of the
# original's trained YOLOv9-t (.fixtures/ly9t_ckpt.pt, carried); the fidelity run with cuda_graph=true;
# the peak VRAM of a cuda_graph=true profile; graph_speedup at fp16.
set -uo pipefail
cd "$(dirname "$0")/../.."
. benchmarks/fidelity/common.sh
areas=${AREAS:-kit capture profile}
targets="libreyolo_cli graph_speedup"; for a in $areas; do targets="$targets test_$a"; done
build_cuda 300 $targets
gpu_tests 90 $areas
D=/tmp/fid_det
timeout 60 $CLI data synth --task detect --out $D --images 400 --imgsz 640 --classes 8 --seed 0 > $L/synth.log 2>&1
timeout 90 $CLI val model=.fixtures/ly9t_ckpt.pt data=$D/data.yaml imgsz=640 batch=16 > $L/val_ly9t.log 2>&1
echo "val ly9t_ckpt.pt rc=$? $(grep -E 'mAP50-95' $L/val_ly9t.log | tail -1)"; pack
ARMS=graph timeout 120 benchmarks/fidelity/run.sh $B $L/fid; pack
timeout 90 $CLI train model=yolo9t data=$D/data.yaml epochs=1 batch=8 imgsz=640 workers=8 cuda_graph=true profile=true profile_stop=true project=/tmp/pr name=g exist_ok=true > $L/profile_graph.log 2>&1
echo "profile cuda_graph rc=$? $(grep -iE 'peak VRAM' $L/profile_graph.log | head -2 | tr '\n' ' ')"; cp /tmp/pr/g/profile_summary.json $L/ 2>/dev/null; pack
PRECISIONS=fp16 timeout 200 benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
echo "graph_speedup rc=$?"; tail -4 $L/graph_speedup.txt; pack
