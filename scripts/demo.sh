#!/usr/bin/env bash
# Quick start, first command: sets up this machine, builds troupe, and runs the
# actor demo (a sharded parameter store whose shard fails, restarts and
# restores its state from a replica), then the cluster demo (a local head and
# worker processes, one of which is killed).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
./build/examples/actors_demo
./build/examples/cluster_demo
