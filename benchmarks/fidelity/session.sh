#!/usr/bin/env bash
# One device call for the fidelity work: build the CLI, the GPU tests and graph_speedup against the
# machine's LibTorch, run the GPU tests of the named areas, the fidelity training runs and graph_speedup.
# Logs go to /tmp/L and come back as $OUT/logs.tgz (the device returns at most 8 files).
#   benchmarks/fidelity/session.sh "AREAS" [fidelity] [graphs] [key=value ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
areas=$1; shift
. benchmarks/fidelity/common.sh
targets="libreyolo_cli"; for a in $areas; do targets="$targets test_$a"; done
do_fid=0; do_graphs=0; extra=()
for x in "$@"; do case $x in fidelity) do_fid=1;; graphs) do_graphs=1; targets="$targets graph_speedup";; *) extra+=("$x");; esac; done
build_cuda 420 $targets
gpu_tests 300 $areas
if [ $do_fid = 1 ]; then benchmarks/fidelity/run.sh $B $L/fid "${extra[@]}"; pack; fi
if [ $do_graphs = 1 ]; then
  timeout 420 benchmarks/graph_speedup/run.sh $B $L/graph_speedup.jsonl > $L/graph_speedup.txt 2>&1
  echo "graph_speedup rc=$?"; tail -8 $L/graph_speedup.txt; pack
fi
