#!/bin/sh
# Starts workerd bound to the life of the process that spawned it: setpriv asks the kernel to send
# SIGKILL when that parent ends, however it ends (kill -9 included), then runs workerd in place
# (same pid throughout, so the host's CPU and memory readings follow it). The host sets
# OUTPOST_WORKERD_BIN to the real workerd binary.
exec setpriv --pdeathsig KILL -- "$OUTPOST_WORKERD_BIN" "$@"
