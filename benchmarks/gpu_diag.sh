#!/usr/bin/env bash
# Short device call: CLI + step_bench only; each run under a timeout so a hang is reported, not waited on.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; L=$OUT; mkdir -p /tmp/deps && for f in .deps/*.deb; do dpkg -x "$f" /tmp/deps; done
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-} LIBREYOLO_EXTRA_PREFIX=/tmp/deps/usr
B=build-cuda; CLI=$B/tools/libreyolo
scripts/build-cuda.sh $B -DLIBREYOLO_BUILD_BENCHMARKS=ON -DLIBREYOLO_BUILD_TESTS=OFF -DLIBREYOLO_BUILD_EXAMPLES=OFF > $L/build.log 2>&1; echo build rc=$?
$CLI data synth --task classify --out /tmp/cls --images 1600 --imgsz 160 --seed 0 > /dev/null 2>&1
run() { local tag=$1; shift; timeout 45 $CLI train model=resnet18 data=/tmp/cls epochs=2 imgsz=128 batch=64 device=cuda \
  project=/tmp/runs name=$tag exist_ok=true profile_warmup=2 profile_steps=6 "$@" > $L/$tag.log 2>&1
  echo "$tag rc=$? $(grep -cE '^epoch' $L/$tag.log) epochs; $(grep -E 'BOUND|step ' $L/$tag.log | head -2 | tr '\n' ' ')"; }
run noprof_w4 profile=false workers=4
run prof_w4 profile=true workers=4
run prof_w0 profile=true workers=0
for m in "yolo9t 8 640 fp16" "yolo9t 8 640 fp32" "resnet18 16 224 fp16" "resnet18 16 224 fp32"; do
  set -- $m; timeout 40 $B/benchmarks/step_bench --model $1 --batch $2 --imgsz $3 --precision $4 2>&1 | tail -1
done
