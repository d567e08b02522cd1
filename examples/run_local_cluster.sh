#!/usr/bin/env bash
# Runs an example's driver on a cluster of this machine: a head and WORKERS
# workers of TROUPE, each offering RESOURCES and loading the actor library
# LIB; the driver gets --head and --token-file, then ARGS. Stops the cluster
# after and exits with the driver's status.
#
#   run_local_cluster.sh TROUPE LIB WORKERS RESOURCES DRIVER [ARGS...]
#   e.g. run_local_cluster.sh /opt/troupe/bin/troupe build-ps/libps_actors.so 3 CPU=2 \
#          build-ps/ps_driver --rounds 30
set -euo pipefail
troupe=$1
lib=$(realpath "$2")
workers=$3
resources=$4
driver=$5
shift 5
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

for w in $(seq "$workers"); do
  "$troupe" worker --head "$head" --token-file "$state/token" --resources "$resources" \
    --actor-lib-dir "$(dirname "$lib")" --actor-lib "$lib" >"$state/worker$w.log" 2>&1 &
  pids+=($!)
done
for _ in $(seq 400); do
  joined=$(cat "$state"/worker*.log | grep -c "joined the cluster" || true)
  [ "$joined" -ge "$workers" ] && break
  sleep 0.05
done

rc=0
timeout 300 "$driver" --head "$head" --token-file "$state/token" "$@" || rc=$?
if [ "$rc" -ne 0 ]; then tail -n 20 "$state"/*.log; fi
exit "$rc"
