#!/usr/bin/env bash
# Session 32: session 31's poller (benchmarks/s31/poll.sh: waits up to WAIT s for "driver done" in LOG, printing the
# driver log's new lines and refreshing $OUT/driver_out.tgz every PERIOD s) with this session's driver log as default.
export LOG=${LOG:-/tmp/s32_driver.log}
exec bash "$(dirname "$0")/../s31/poll.sh"
