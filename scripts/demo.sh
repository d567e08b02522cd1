#!/usr/bin/env bash
# Quick start, first command: sets up this machine, builds the troupe executable (only what the
# demo runs), fetches the complete works of Shakespeare, and runs the main job: a local cluster
# (a head and two worker processes) trains a small character-level GPT on them with data
# parallelism (DDP over two replicas), showing the training and validation loss fall on works
# held out whole; then samples a few lines from the trained weights.
#
# The addition task stays the fast example: troupe train examples/configs/addition_ddp.json --local 2
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
TROUPE_BUILD_TARGETS=troupe ./scripts/build.sh
./scripts/fetch_text.sh data
troupe=./build/cli/troupe
# Four works held out whole for validation (about 10% of the text): no window of them is trained on.
val=data/shakespeare/hamlet.txt,data/shakespeare/julius_caesar.txt
val=$val,data/shakespeare/tempest.txt,data/shakespeare/sonnets.txt
"$troupe" data prepare --tokenizer bytes --val-files "$val" --output data/shakespeare_char \
  data/shakespeare/*.txt
"$troupe" train examples/configs/shakespeare_char.json --local 2
echo
echo "sampling from runs/shakespeare_char (temperature 0.8, top-k 40):"
for prompt in "ROMEO:" "KING HENRY." "To be"; do
  echo "---"
  "$troupe" generate --model runs/shakespeare_char --prompt "$prompt" --temperature 0.8 \
    --top-k 40 --seed 7 --no-stop --max-new-tokens 240
done
