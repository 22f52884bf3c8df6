#!/usr/bin/env bash
# Session 51's first device call (carry .deps .orig): benchmarks/s51/driver.sh (ARMS overrides) beside
# benchmarks/s48/suites.sh (AREAS overrides; the default puts first the areas this session's change touches: the AIFI
# layer's autocast sum, fidelity row 38, runs in every DETR encoder with that layer), both in the background from a copy at /tmp/s43;
# polls for WAIT seconds (default 540) and leaves $OUT/driver_out.tgz. A later call on the warm machine polls on with:
#   T0=$(date +%s); while [ $(( $(date +%s) - T0 )) -lt 500 ] && ! { grep -q "driver done" /tmp/s43_driver.log && \
#     grep -q "suites done" /tmp/s48_suites.log; }; do sleep 5; done; cd /tmp/s43out && tar czf $OUT/driver_out.tgz .; \
#   tail -5 /tmp/s43_driver.log; cat /tmp/s48_suites.log
set -uo pipefail
cd "$(dirname "$0")/../.."
# The device's copy of the working tree carries the .git of an earlier sync (session 51 printed the session start's
# commit), so the commit id comes from .head when there: `git rev-parse --short HEAD > .head` here before the call
# (an untracked file travels with the tree; delete it after).
head=$(cat .head 2>/dev/null || git log -1 --format=%h)
rm -rf /tmp/s43 /tmp/s43out; cp -a . /tmp/s43 && cd /tmp/s43 || exit 1
echo "copy of $head at /tmp/s43"
(COMMIT=$head setsid bash benchmarks/s51/driver.sh > /tmp/s43_driver.log 2>&1 < /dev/null &)
(COMMIT=$head AREAS="${AREAS-dfine_net capture kit precision yolox rtmdet segformer profile}" \
  setsid bash benchmarks/s48/suites.sh > /tmp/s48_suites.log 2>&1 < /dev/null &)
sleep 2
LOG=/tmp/s43_driver.log DRIVER_OUT=/tmp/s43out WAIT=${WAIT:-540} PERIOD=15 bash benchmarks/s31/poll.sh
cd /tmp/s43out && tar czf $OUT/driver_out.tgz .
cat /tmp/s48_suites.log
