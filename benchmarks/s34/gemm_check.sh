#!/usr/bin/env bash
# Session 34's short device call (what a refused start left of the session's device time): builds only the
# capture area's test runner (test_capture, -O1) and runs the capture suite's session-34 cases: a Linear's GEMMs
# eager / side stream / graph replay, the token nets, the AIFI nets and the D-FINE line's regions.
#   OPT= the optimisation flag (-O1), CASES= the doctest case filter (the four groups above).
#   cp -a . /tmp/s34 && cd /tmp/s34 && (COMMIT=... setsid bash benchmarks/s34/gemm_check.sh > /tmp/s34_driver.log 2>&1 < /dev/null &)
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/device_lib.sh
export OUT=/tmp/s34out
driver_start
driver_deps
driver_build_runners test_capture
driver_cases "capture cases" test_capture capture_s34.txt 120 -tc="${CASES:-*GEMM*,*token net*,*AIFI*,*region alone*}" -s
echo "driver done $(date -u +%FT%TZ)"
