#!/usr/bin/env bash
# Session 42's device call (the one that ran), for what was left of its budget after six refused starts:
# the GPU suites of the areas the merged branch `detr-decoder-fidelity` touches (DEIMv2's decoder and ViT, the D-FINE
# line's denoising, the EMA and its step-graph form: kit, train, dfine_net, step, capture) built as area runners, and
# conv_algos (issue 41 item 1) while they build, cut at the build's end with the rows it made kept. Carry .deps .orig.
#   cp -a . /tmp/s42 && cd /tmp/s42 && (COMMIT=... setsid bash benchmarks/s42/call_min.sh > /tmp/s42_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s42out
driver_start
driver_deps
python3 benchmarks/s42/tiny_set.py /tmp/tiny images=20 imgsz=640 > "$OUT/tiny.log" 2>&1 || tail -3 "$OUT/tiny.log"
(
  for run in instant bench b benchdet bench2; do
    mode=${run%2}
    envb=(); [ "$mode" = b ] && envb=(TORCH_CUDNN_USE_HEURISTIC_MODE_B=1)
    PYTHONUNBUFFERED=1 timeout 240 env "${envb[@]}" python3 benchmarks/s42/conv_algos.py measure .orig yolo9t /tmp/tiny/data.yaml \
      "$OUT/conv_$run.jsonl" "$mode" batch=8 imgsz=640 workers=2 > "$OUT/conv_$run.log" 2>&1
    echo "conv_algos $run rc=$? rows=$(wc -l < "$OUT/conv_$run.jsonl" 2>/dev/null) $(grep '^{' "$OUT/conv_$run.log" | tail -1 | cut -c1-200) $(date -u +%T)"
    grep -E "Error|error" "$OUT/conv_$run.log" | tail -3
  done
) &
cpid=$!
BUILD_TIMEOUT=420 driver_build_runners test_kit test_train test_dfine_net test_step test_capture
kill $cpid 2>/dev/null; pkill -f "conv_algos.py measure"; sleep 1
for f in "$OUT"/conv_*.jsonl; do echo "conv rows $(basename $f): $(wc -l < $f)"; done
python3 benchmarks/s42/conv_algos.py report "$OUT" > "$OUT/conv_report.md" 2>&1
sed -n 1,24p "$OUT/conv_report.md"
driver_cases kit test_kit gpu_kit.txt 300
driver_cases train test_train gpu_train.txt 150
driver_cases dfine_net test_dfine_net gpu_dfine_net.txt 150
driver_cases step test_step gpu_step.txt 480
driver_cases capture test_capture gpu_capture.txt 300
echo "driver done $(date -u +%FT%TZ)"
