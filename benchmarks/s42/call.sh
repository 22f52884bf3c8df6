#!/usr/bin/env bash
# The next session's device driver, written in session 41 (carry .deps and .orig; make .orig with
# benchmarks/fidelity/prepare_orig.sh). Poll it across calls on the warm machine (benchmarks/s31/poll.sh). In order:
#   1. Issue 41 item 1, while the build runs on the CPU: conv_algos.py over the original's YOLOv9-t training step
#      (b8, 640, fp16 autocast, channels-last) in five processes: cuDNN's instant heuristic (our default), heuristic
#      mode B, autotuning twice, autotuning among deterministic engines. Per layer and op (forward, backward-data,
#      backward-filter; fp16 and fp32/TF32): the
#      kernels, the error against fp64 over the output rounding's, a systematic bias, underflow, bit-reproducibility;
#      and whether autotuning's choice changes between processes. Session 20 found mode B and autotuning 1.5x faster
#      and 0.02-0.05 mAP50-95 lower, reproducibly for mode B: this says which layers' algorithms differ and how.
#   2. benchmarks/gpu_suites.sh's build at -O1, then every area's GPU suite. Meant for main with branch
#      `detr-decoder-fidelity` merged (session 41: DEIMv2 embeds the initial reference boxes once; the D-FINE line's
#      denoising keeps crossed negative boxes' sizes; DEIMv2 atto..pico's shared box head averaged d^3 by the EMA, the
#      step graphs' device form included; a DEIMv2-s/m clone's ViT; CPU-verified, never run on a GPU): the suites
#      verify it there.
#   3. ACC=1 (optional, about 4 minutes, run beside the suites): ours DEIMv2-atto, DEIMv2-s and EC-s, issue 39's protocol (shapes set, seed
#      0), the three at once, against the original's numbers of sessions 21-25 (DEIMv2-atto 0.166 mean of three
#      seeds, DEIMv2-s 0.468 by its own validator, EC-s 0.323): the fixes' first accuracy reading.
#   cp -a . /tmp/s42 && cd /tmp/s42 && (COMMIT=... setsid bash benchmarks/s42/call.sh > /tmp/s42_driver.log 2>&1 < /dev/null &)
#   LOG=/tmp/s42_driver.log DRIVER_OUT=/tmp/s42out WAIT=<s> PERIOD=15 bash /tmp/s42/benchmarks/s31/poll.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s42out
driver_start
(driver_build > "$OUT/build_stage.log" 2>&1) &
bpid=$!
python3 benchmarks/s42/tiny_set.py /tmp/tiny images=20 imgsz=640 > "$OUT/tiny.log" 2>&1 || tail -3 "$OUT/tiny.log"
# conv_algos only while the build runs (device time: it must not delay the suites); each run writes its rows as it
# makes them, so the run the build's end cuts keeps the layers it finished. instant and bench first.
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
wait $bpid
tail -3 "$OUT/build_stage.log"
kill $cpid 2>/dev/null; pkill -f "conv_algos.py measure"; sleep 1
for f in "$OUT"/conv_*.jsonl; do echo "conv rows $(basename $f): $(wc -l < $f)"; done
python3 benchmarks/s42/conv_algos.py report "$OUT" > "$OUT/conv_report.md" 2>&1
sed -n 1,30p "$OUT/conv_report.md"
if [ "${ACC:-0}" = 1 ]; then
  # Beside the suites (no suite case times anything; they compare runs with each other): ours DEIMv2-atto, DEIMv2-s
  # and EC-s on issue 39's protocol, the three at once.
  (
    . benchmarks/fidelity/common.sh   # $L, lane_arm, synth_set, pack
    STYLE=shapes synth_set /tmp/shapes_0 0
    for m in deimv2atto deimv2s ec-s; do ARM_TIMEOUT=600 lane_arm $m 0 ours shapes & done
    wait
    grep -h "mAP50-95" $L/lanes/*.txt
    pack
    echo "acc lanes done $(date -u +%T)"
  ) > "$OUT/acc.log" 2>&1 &
  apid=$!
fi
# The areas the merged branch touches first (DEIMv2's decoder and ViT, the D-FINE line's denoising, the EMA and its
# step-graph form), then the rest.
first="capture dfine_net kit step train"
driver_suites AREAS="$first"
driver_suites SKIP_AREAS="$first"
if [ "${ACC:-0}" = 1 ]; then wait $apid; cat "$OUT/acc.log"; fi
echo "driver done $(date -u +%FT%TZ)"
