#!/usr/bin/env bash
# Session 32: waits up to WAIT seconds for the driver (LOG, until it prints "driver done") and, every PERIOD
# seconds meanwhile, prints the driver log's new lines and refreshes $OUT/driver_out.tgz (DRIVER_OUT packed) and
# $OUT/driver.log, so that a call cut by its time limit or by the session's device budget still returns the
# latest state (benchmarks/s24/poll.sh copied only at its end).
WAIT=${WAIT:-500}; PERIOD=${PERIOD:-45}; LOG=${LOG:-/tmp/s32_driver.log}; t0=$(date +%s); shown=0
snap() {
  [ -f "$LOG" ] && cp "$LOG" $OUT/driver.log
  [ -n "${DRIVER_OUT:-}" ] && tar czf $OUT/driver_out.tgz.part -C "$DRIVER_OUT" . 2>/dev/null && mv $OUT/driver_out.tgz.part $OUT/driver_out.tgz
  [ -n "${DRIVER_OUT:-}" ] && cp "$DRIVER_OUT"/gpu_suites.log $OUT/ 2>/dev/null
  local n; n=$(wc -l < "$LOG" 2>/dev/null || echo 0)
  [ "$n" -gt "$shown" ] && sed -n "$((shown + 1)),${n}p" "$LOG" && shown=$n
}
while [ $(( $(date +%s) - t0 )) -lt $WAIT ] && ! grep -q "driver done" $LOG 2>/dev/null; do
  sleep $PERIOD; snap
done
snap
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>&1 | tee $OUT/gpu_now.txt
