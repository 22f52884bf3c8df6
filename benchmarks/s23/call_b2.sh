#!/usr/bin/env bash
# Session 23, the call that replaced call_b.sh (which found a fresh machine without call A's build and stopped at
# rc=127): the build again (gpu_suites.sh build, -O1), then at once, in the background, the GPU suites of
# capture / deimv2 / ec / kit / step under an overall timeout of 230 s (kit was cut there and ran again in a
# later call with step), and DEIMv2-atto's accuracy arms: ours letterbox and ours train_resize=stretch at seeds
# 0, 1, 2, the original at seeds 1, 2 (each arm's timeout 225 s, so the originals were cut in epoch 8). This is
# the command as it ran, one line there, here split for reading. DEIMv2-s and the `val` control of call_b.sh
# were left out for the device budget.
export OUT=${OUT:-/tmp/out}
(LIBREYOLO_GPU_OPT=-O1 BUILD_TIMEOUT=400 COMMIT=76aa321 bash benchmarks/gpu_suites.sh build
 (AREAS="kit ec deimv2 capture step" SUITE_TIMEOUT=200 COMMIT=76aa321 timeout 230 bash benchmarks/gpu_suites.sh suites > /tmp/suites_b.txt 2>&1 &)
 . benchmarks/fidelity/common.sh
 for s in 0 1 2; do STYLE=shapes synth_set /tmp/shapes_$s $s & done; wait
 arm() { local skip=SKIP_ORIGINAL; [ "$3" = original ] && skip=SKIP_OURS
   env $skip=1 SKIP_BUILD=1 STYLE=shapes SEEDS=$2 ARM_TIMEOUT=$4 TAG="${5:-}" OURS_KEYS="${6:-}" \
     bash benchmarks/fidelity/side_by_side.sh $1 > $L/arm_${1}${5:-}_$2_$3.txt 2>&1; }
 for s in 1 2; do arm deimv2atto $s original 225 & done
 for s in 0 1 2; do arm deimv2atto $s ours 225 & arm deimv2atto $s ours 225 _stretch train_resize=stretch & done
 wait; sleep 5
 cat $L/arm_*.txt | grep -E "^seed" | tee $OUT/lanes.txt; pack) 2>&1 | tail -30
# Then, on the same machine: AREAS="<the 28 other areas>" SUITE_TIMEOUT=150 COMMIT=76aa321 benchmarks/gpu_suites.sh suites,
# and AREAS="kit step" SUITE_TIMEOUT=240 COMMIT=76aa321 benchmarks/gpu_suites.sh suites.
