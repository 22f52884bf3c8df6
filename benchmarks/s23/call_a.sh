#!/usr/bin/env bash
# Session 23, device call A on a fresh machine (carry .deps and .orig, the original's c41461e package):
# (1) the build of the GPU suites, the CLI and graph_speedup (benchmarks/gpu_suites.sh build, -O1 to fit the
#     call); (2) issue 39's step table after the ViT RoPE change (nn/vit.hpp token_rope / rope_qk): our
#     graph_speedup (b4, 640, AMP; eager and graph arms, one process each) for DEIMv2-s, EC-s and DEIMv2-atto,
#     then the original's own eager step (benchmarks/fidelity/original_step.py) for DEIMv2-s and EC-s in the
#     same call; (3) where time is left, `profile run` of DEIMv2-s (its host ops table).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=${BUILD_TIMEOUT:-400} COMMIT=${COMMIT:-unknown} bash benchmarks/gpu_suites.sh build
. benchmarks/fidelity/common.sh
gs=$B/benchmarks/graph_speedup/graph_speedup
mkdir -p /tmp/st
STYLE=shapes synth_set /tmp/shapes_0 0
t1=$(date +%s)
for m in deimv2s ec-s deimv2atto; do
  for arm in eager graph; do
    timeout 100 "$gs" --arm $arm --model $m --batch 4 --imgsz 640 --warmup 8 --steps 20 --state /tmp/st/$m.state \
      >> "$OUT/detr_speed.jsonl" 2>> "$OUT/err.txt" || echo "{\"model\":\"$m\",\"arm\":\"$arm\",\"failed\":true}" >> "$OUT/detr_speed.jsonl"
  done
done
echo "graph_speedup: $(( $(date +%s) - t1 )) s" | tee "$OUT/s23a.txt"
t2=$(date +%s)
for m in deimv2s ec-s; do
  keys="batch=4 imgsz=640 workers=4 epochs=10 no_aug_epochs=2 eval_interval=0 multi_scale=false"
  case $m in ec-*) keys="$keys allow_experimental=true" ;; esac
  PYTHONUNBUFFERED=1 timeout 100 python3 benchmarks/fidelity/original_step.py .orig $m /tmp/shapes_0/data.yaml /tmp/ostep/$m $keys \
    > $L/ostep_$m.log 2>&1; echo "original_step $m rc=$?"
  grep '^{"model"' $L/ostep_$m.log >> "$OUT/orig_speed.jsonl"
done
echo "original_step: $(( $(date +%s) - t2 )) s" | tee -a "$OUT/s23a.txt"
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 70 ]; then
  timeout $(( left - 10 )) $CLI profile run /tmp/shapes_0/data.yaml --weights deimv2s --batch 4 --imgsz 640 --device cuda \
    --project /tmp/prof > $L/profile_deimv2s.log 2>&1; echo "profile rc=$?"
  for v in phases ops; do $CLI profile $v /tmp/prof/prof/profile.json > "$OUT/profile_deimv2s_$v.txt" 2>&1; done
  cp /tmp/prof/prof/profile.json "$OUT/profile_deimv2s.json" 2>/dev/null
else
  echo "profile: skipped, $left s left" | tee -a "$OUT/s23a.txt"
fi
pack
step_table "$OUT" | tee -a "$OUT/s23a.txt"
tail -c 3000 "$OUT/err.txt" > "$OUT/err_tail.txt" 2>/dev/null; rm -f "$OUT/err.txt"
echo "call A: $(( $(date +%s) - t0 )) s"
