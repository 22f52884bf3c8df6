#!/usr/bin/env bash
# Session 22, device call C on the warm machine (build-cuda kept; carry .deps and .orig):
# (1) issue 39's step table: our graph_speedup (b4, 640, default precision: AMP for all three; eager and graph
#     arms, one process each) for DEIMv2-atto, DEIMv2-s and EC-s, then the original's own eager step on the
#     same GPU (benchmarks/fidelity/original_step.py: its trainer set up as train() would, one batch of its
#     own loader replayed; "bare" = without clipping and EMA, as our arms; "full" = with them), one at a time;
# (2) the GPU suites of every area call A did not run.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. benchmarks/fidelity/common.sh
gs=$B/benchmarks/graph_speedup/graph_speedup
mkdir -p /tmp/st
STYLE=shapes synth_set /tmp/shapes_0 0
t1=$(date +%s)
for m in deimv2atto deimv2s ec-s; do
  for arm in eager graph; do
    timeout 150 "$gs" --arm $arm --model $m --batch 4 --imgsz 640 --warmup 8 --steps 20 --state /tmp/st/$m.state \
      >> "$OUT/detr_speed.jsonl" 2>> "$OUT/err.txt" || echo "{\"model\":\"$m\",\"arm\":\"$arm\",\"failed\":true}" >> "$OUT/detr_speed.jsonl"
  done
done
echo "graph_speedup: $(( $(date +%s) - t1 )) s" | tee "$OUT/s22.txt"
t2=$(date +%s)
for m in deimv2atto deimv2s ec-s; do
  keys="batch=4 imgsz=640 workers=4 epochs=10 no_aug_epochs=2 eval_interval=0 multi_scale=false"
  case $m in ec-*) keys="$keys allow_experimental=true" ;; esac
  PYTHONUNBUFFERED=1 timeout 150 python3 benchmarks/fidelity/original_step.py .orig $m /tmp/shapes_0/data.yaml /tmp/ostep/$m $keys \
    > $L/ostep_$m.log 2>&1; echo "original_step $m rc=$?"
  grep '^{"model"' $L/ostep_$m.log >> "$OUT/orig_speed.jsonl"
done
echo "original_step: $(( $(date +%s) - t2 )) s" | tee -a "$OUT/s22.txt"
pack
python3 - "$OUT" <<'PY' | tee -a "$OUT/s22.txt"
import json, sys
o = sys.argv[1]
for l in open(o + "/detr_speed.jsonl"):
    try: d = json.loads(l)
    except Exception: print("unparsed", l[:200]); continue
    print("ours", {k: d.get(k) for k in ("model", "arm", "precision", "step_ms_min", "step_ms_median", "gpu_busy_ms", "peak_vram_mb", "failed")})
try:
    for l in open(o + "/orig_speed.jsonl"):
        d = json.loads(l); print("original", d["model"], d.get("batch_shape"), "amp", d.get("amp"), d.get("arms"), "peak", d.get("peak_vram_mb"))
except FileNotFoundError: print("no original step lines")
PY
AREAS="step capture precision profile yolo9 yolox rtmdet segformer distributed data detect_data cli core dfine_net ec eval fomo harden install io lingbot mobilenetv4 plot point resnet rtdetr semantic trainer yolonas yolov7" \
  SUITE_TIMEOUT=${SUITE_TIMEOUT:-150} bash benchmarks/gpu_suites.sh suites
tail -c 3000 "$OUT/err.txt" > "$OUT/err_tail.txt" 2>/dev/null; rm -f "$OUT/err.txt"
