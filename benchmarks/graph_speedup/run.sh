#!/usr/bin/env bash
# Runs every arm of the CUDA-graph benchmark in its own process and prints the table.
#   [MODELS="resnet18 yolo9t"] [PRECISIONS="fp16 fp32"] [ARMS="eager graph step"] benchmarks/graph_speedup/run.sh BUILD_DIR [OUT_JSONL]
# MODELS: registered model names (graph_speedup --model), each optionally NAME:BATCH or NAME:BATCH:IMGSZ
# (e.g. rtdetr-r18:4, fomos:16:96). EXTRA: more graph_speedup arguments for every arm (e.g. "--accumulate 4").
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
    for arm in ${ARMS:-eager graph step}; do
      "$bin" --arm "$arm" --model "$model" "${batch[@]}" --precision "$precision" --state "$state_dir/$entry.state" ${EXTRA:-} | tee -a "$out" || echo "graph_speedup: $entry $precision $arm failed" >&2
    done
  done
done
rm -rf "$state_dir"  # the states and their synthetic sets
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {(r["model"], r["batch"], r["precision"], r["arm"]): r for r in rows}
print(f'{"model":14} {"batch":>5} {"prec":5} {"eager ms":>9} {"graph ms":>9} {"step ms":>8} {"speedup g/s":>12} '
      f'{"busy e/g/s ms":>20} {"graph/busy":>10} {"step/busy":>9} {"VRAM e/g/s MB":>20} {"replayed g/s":>13}')
for (model, batch, prec) in sorted({(m, b, p) for (m, b, p, _) in by}):
    e, g, s = (by.get((model, batch, prec, arm)) for arm in ("eager", "graph", "step"))
    if not e or not g:
        continue
    sm = f'{s["step_ms_min"]:8.2f}' if s else f'{"-":>8}'
    sp = f'{e["step_ms_min"] / g["step_ms_min"]:5.2f}x/' + (f'{e["step_ms_min"] / s["step_ms_min"]:.2f}x' if s else '-')
    busy = f'{e["gpu_busy_ms"]:6.2f}/{g["gpu_busy_ms"]:6.2f}/' + (f'{s["gpu_busy_ms"]:.2f}' if s else '-')
    sb = f'{s["step_over_busy"]:9.2f}' if s else f'{"-":>9}'
    vram = f'{e["peak_vram_mb"]:.0f}/{g["peak_vram_mb"]:.0f}/' + (f'{s["peak_vram_mb"]:.0f}' if s else '-')
    rep = f'{g["capture"]["replayed_steps"]}/' + (f'{s["capture"]["replayed_steps"]}' if s else '-')
    print(f'{model:14} {batch:5} {prec:5} {e["step_ms_min"]:9.2f} {g["step_ms_min"]:9.2f} {sm} {sp:>12} '
          f'{busy:>20} {g["step_over_busy"]:10.2f} {sb} {vram:>20} {rep:>13}')
    if s and s["capture"].get("step", {}).get("graphs"):
        for gr in s["capture"]["step"]["graphs"]:
            print(f'    step graph {gr["shapes"]}: {gr["vram_mib"]:.1f} MiB, {gr["replays"]} replays')
PY
