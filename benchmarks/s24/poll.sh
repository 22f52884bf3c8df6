#!/usr/bin/env bash
# Session 24: a call on the warm machine that waits up to WAIT seconds for benchmarks/s24/driver.sh (or until it
# prints "driver done"), then copies its logs into $OUT: the driver's log (LOG, default session 24's), every lane line
# so far, GPU load.
WAIT=${WAIT:-500}; t0=$(date +%s); LOG=${LOG:-/tmp/s24_driver.log}
while [ $(( $(date +%s) - t0 )) -lt $WAIT ] && ! grep -q "driver done" $LOG 2>/dev/null; do sleep 10; done
cp $LOG $OUT/ 2>/dev/null
grep -h -E "^seed" /tmp/L/lanes/*.txt 2>/dev/null | sort -u > $OUT/lanes_so_far.txt
# DRIVER_OUT: what the driver itself writes for return (session 25: the RF-DETR fixtures under /tmp/s25out). The
# device tool returns at most 8 files per call (session 28 lost its second suites log that way), so the folder comes
# back as one archive, beside a copy of its GPU suites log.
if [ -n "${DRIVER_OUT:-}" ]; then
  tar czf $OUT/driver_out.tgz -C "$DRIVER_OUT" . 2>/dev/null
  cp "$DRIVER_OUT"/gpu_suites.log $OUT/ 2>/dev/null
fi
tar czf $OUT/logs.tgz -C /tmp/L . 2>/dev/null
nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader > $OUT/gpu_now.txt 2>&1
ps -eo pid,etimes,pcpu,args --sort=-pcpu | grep -E "python3|libreyolo" | grep -v grep | head -40 > $OUT/procs.txt
tail -30 $LOG; cat $OUT/lanes_so_far.txt; cat $OUT/gpu_now.txt
