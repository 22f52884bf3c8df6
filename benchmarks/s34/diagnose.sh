#!/usr/bin/env bash
# Session 34's second device call (carry .deps; COMMIT= the commit): which operation makes a graphed region compute
# other bits than eager when it holds attention (D-FINE-n's AIFI layer; LingBot's ViT under the kit).
#   1. benchmarks/gpu_suites.sh build (-O1);
#   2. the capture suite's token-net and AIFI cases and the kit's LingBot AMP case, three times: as they are, with
#      DISABLE_ADDMM_CUDA_LT=1 (addmm with bias through cuBLAS, not cuBLASLt), and with
#      CUBLAS_WORKSPACE_CONFIG=:4096:8 (a fixed cuBLAS workspace); one summary line per case and arm.
#   cp -a . /tmp/s34 && cd /tmp/s34 && (COMMIT=... setsid bash benchmarks/s34/diagnose.sh > /tmp/s34_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s34out
driver_start
driver_build
driver_deps
bin=build-cuda/tests/libreyolo_tests
cases='*token net*,*AIFI*,*AMP<libreyolo::LingBotFamily>*'
for arm in default lt_off ws_fixed; do
  envs=()
  [ $arm = lt_off ] && envs=(DISABLE_ADDMM_CUDA_LT=1)
  [ $arm = ws_fixed ] && envs=(CUBLAS_WORKSPACE_CONFIG=:4096:8)
  env "${envs[@]}" timeout 200 $bin --test-suite=gpu -tc="$cases" -s > $OUT/diag_$arm.txt 2>&1
  echo "== $arm rc=$? $(grep -E '^\[doctest\] test cases' $OUT/diag_$arm.txt)"
  grep -E "^TEST CASE|ERROR|MESSAGE: (graph and eager|SDPA|eager is not)" $OUT/diag_$arm.txt | grep -v "^--" | cut -c1-260
done
echo "driver done $(date -u +%FT%TZ)"
