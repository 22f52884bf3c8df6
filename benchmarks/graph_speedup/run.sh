#!/usr/bin/env bash
# Runs every arm of the CUDA-graph benchmark in its own process and prints the table.
#   [MODELS="resnet18 yolo9t"] [PRECISIONS="fp16 fp32"] benchmarks/graph_speedup/run.sh BUILD_DIR [OUT_JSONL]
# MODELS: registered model names (graph_speedup --model), each optionally NAME:BATCH or NAME:BATCH:IMGSZ
# (e.g. rtdetr-r18:4, fomos:16:96).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [OUT_JSONL]}
out=${2:-graph_speedup.jsonl}
bin="$build/benchmarks/graph_speedup/graph_speedup"
state_dir=$(mktemp -d)
: > "$out"
for entry in ${MODELS:-resnet18 yolo9t}; do
  IFS=: read -r model b sz <<< "$entry"; batch=()
  [ -n "$b" ] && batch+=(--batch "$b"); [ -n "$sz" ] && batch+=(--imgsz "$sz")
  for precision in ${PRECISIONS:-fp16 fp32}; do
    for arm in eager graph; do
      "$bin" --arm "$arm" --model "$model" "${batch[@]}" --precision "$precision" --state "$state_dir/$entry.state" | tee -a "$out" || echo "graph_speedup: $entry $precision $arm failed" >&2
    done
  done
done
rm -rf "$state_dir"  # the states and their synthetic sets
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["model"], r["batch"], r["precision"], r["arm"]): r for r in rows}
print(f'{"model":14} {"batch":>5} {"prec":5} {"eager ms":>9} {"graph ms":>9} {"speedup":>8} {"busy e/g ms":>13} '
      f'{"graph/busy":>10} {"VRAM e/g MB":>15} {"replayed":>8}')
for (model, batch, prec) in sorted({(m, b, p) for (m, b, p, _) in by}):
    e, g = by.get((model, batch, prec, "eager")), by.get((model, batch, prec, "graph"))
    if not e or not g:
        continue
    print(f'{model:14} {batch:5} {prec:5} {e["step_ms_min"]:9.2f} {g["step_ms_min"]:9.2f} '
          f'{e["step_ms_min"] / g["step_ms_min"]:7.2f}x {e["gpu_busy_ms"]:6.2f}/{g["gpu_busy_ms"]:<6.2f} '
          f'{g["step_over_busy"]:10.2f} {e["peak_vram_mb"]:7.0f}/{g["peak_vram_mb"]:<7.0f} '
          f'{g["capture"]["replayed_steps"]:8}')
PY
