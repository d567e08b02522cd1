#!/usr/bin/env bash
# Quick start, first command: sets up this machine, builds troupe, and runs the
# main job: a local cluster (a head and two worker processes) trains a small
# GPT on 2-digit addition with data parallelism (DDP over two replicas),
# showing the loss fall and the accuracy on held-out sums rise; then samples
# a few sums from the trained weights.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
out=runs/demo
./build/cli/troupe train --config examples/configs/addition_ddp.json --local 2 --output "$out"
echo
echo "sampling from $out (answers are written least significant digit first):"
for prompt in "07+97=" "58+66=" "99+99="; do
  ./build/cli/troupe generate --model "$out" --prompt "$prompt"
done
