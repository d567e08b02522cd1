#!/usr/bin/env bash
# Runs the example on a cluster of this machine: a head and three workers of
# the given troupe, the workers loading libps_actors.so, then ps_driver; stops
# the cluster after. Exits with the driver's status.
#
#   run_local.sh TROUPE BUILD_DIR [ROUNDS]    (BUILD_DIR: where libps_actors.so
#                                              and ps_driver were built)
set -euo pipefail
troupe=$1
build=$(cd "$2" && pwd)
rounds=${3:-30}
state=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT

"$troupe" head --port 0 --http-port 0 --state-dir "$state" >"$state/head.log" 2>&1 &
pids+=($!)
head=""
for _ in $(seq 400); do
  head=$(sed -n 's/^troupe head listening on //p' "$state/head.log")
  [ -n "$head" ] && break
  sleep 0.05
done
[ -n "$head" ] || { cat "$state/head.log"; exit 1; }

for w in 1 2 3; do
  "$troupe" worker --head "$head" --token-file "$state/token" --resources CPU=2 \
    --actor-lib-dir "$build" --actor-lib "$build/libps_actors.so" >"$state/worker$w.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 400); do
  joined=$(cat "$state"/worker*.log | grep -c "joined the cluster" || true)
  [ "$joined" -ge 3 ] && break
  sleep 0.05
done

rc=0
timeout 300 "$build/ps_driver" --head "$head" --token-file "$state/token" --rounds "$rounds" || rc=$?
if [ "$rc" -ne 0 ]; then tail -n 20 "$state"/*.log; fi
exit "$rc"
