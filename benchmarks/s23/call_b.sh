#!/usr/bin/env bash
# Session 23, device call B as planned; it did not run (the machine had gone back; see call_b2.sh) — on call A's warm machine (build-cuda kept; carry .deps and .orig): issue 39's
# accuracy protocol (benchmarks/fidelity/side_by_side.sh with STYLE=shapes: data synth --task detect --images
# 400 --imgsz 640 --classes 8 --seed S; from scratch, 10 epochs, batch 4, no_aug_epochs=2, each library's
# default precision), every arm its own background process on the one GPU (wall times are under that shared
# load, not lone runs):
#   DEIMv2-atto: ours at seeds 0, 1, 2, the original at seeds 1, 2 (seed 0's original ran in session 21:
#     0.210), to see whether session 22's 0.165 vs 0.210 is a gap or the spread of one seed;
#     and our `val` of our own weights/last.pt beside our in-training number (the original's are read by
#     `val`, so this checks that the two read-outs agree);
#   DEIMv2-atto with train_resize=stretch (the originals' last training resize; ours letterboxes by default) at
#     seeds 0, 1, 2: the one known difference left in its recipe, measured beside the letterbox arms;
#   DEIMv2-s: ours and the original at seed 0 (the original needs > 300 s; it gets ARM_TIMEOUT_S).
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. benchmarks/fidelity/common.sh
t0=$(date +%s)
for s in 0 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done; wait
arm() {  # arm MODEL SEED ours|original TIMEOUT [TAG OURS_KEYS]
  local skip=SKIP_ORIGINAL; [ "$3" = original ] && skip=SKIP_OURS
  env $skip=1 SKIP_BUILD=1 STYLE=shapes SEEDS=$2 ARM_TIMEOUT=$4 TAG="${5:-}" OURS_KEYS="${6:-}" \
    bash benchmarks/fidelity/side_by_side.sh $1 > $L/arm_${1}${5:-}_$2_$3.txt 2>&1
}
arm deimv2s 0 original ${ARM_TIMEOUT_S:-520} &
arm deimv2s 0 ours 300 &
for s in 0 1 2; do arm deimv2atto $s ours 300 & arm deimv2atto $s ours 300 _stretch train_resize=stretch & done
for s in 1 2; do arm deimv2atto $s original 420 & done
wait
for s in 0 1 2; do
  timeout 60 $CLI val model=/tmp/ours/deimv2atto_$s/weights/last.pt data=/tmp/shapes_$s/data.yaml imgsz=640 batch=16 \
    > $L/ours_val_deimv2atto_$s.log 2>&1
  echo "seed $s deimv2atto ours-val rc=$? $(grep -o '"mAP50":[0-9.]*,"mAP50-95":[0-9.]*' $L/ours_val_deimv2atto_$s.log | tail -1)"
done | tee $L/ours_val.txt
cat $L/arm_*.txt | grep -E "^seed" | tee "$OUT/lanes.txt"
cat $L/ours_val.txt >> "$OUT/lanes.txt"
echo "call B: $(( $(date +%s) - t0 )) s" | tee -a "$OUT/lanes.txt"
pack
