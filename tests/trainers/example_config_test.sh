#!/usr/bin/env bash
# Trains one config of examples/configs/ as its README row says to run it and checks
# its stated result (examples/configs/README.md, "Stated results"):
#
#   example_config_test.sh TROUPE SOURCE_DIR WORKDIR NAME
#
# runs examples/configs/NAME.json from WORKDIR (its runs/ and data/ land there):
#   - the addition configs: `troupe train --local 2`; the final held-out accuracy (the last
#     "eval at step N: addition accuracy X%" line) must be at least 95%;
#   - llama_finetune: first exports what llama_addition trained (its test must have run in
#     the same WORKDIR: ctest's fixture orders them) to runs/llama_addition/hf;
#   - elastic: on a running cluster (a head and two workers started here, `--head`);
#   - text_ddp: on a dataset made by `troupe data prepare` from SOURCE_DIR/docs/*.md; the
#     final training loss must fall below 1.5 nats a byte (from 5.5, uniform over bytes).
#   - shakespeare_char: on the corpus scripts/fetch_text.sh fetches (into WORKDIR/data), four
#     works held out as scripts/demo.sh holds them out; the final validation loss must be at
#     most 1.95 nats a character (nanoGPT's CPU configuration reaches that on its split).
# Every command is bounded by `timeout`; the cluster this starts is stopped on exit.
set -euo pipefail
troupe=$1
source_dir=$(realpath "$2")
workdir=$3
name=$4
config=$source_dir/examples/configs/$name.json
[ -f "$config" ] || { echo "no config $config"; exit 1; }
mkdir -p "$workdir"
cd "$workdir"
threads=1
limit=900  # seconds for one training run

pids=()
state=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -z "$state" ] || rm -rf "$state"
}
trap cleanup EXIT

log=$workdir/$name.log
train() {
  local start=$SECONDS rc=0
  timeout -s KILL "$limit" "$troupe" train --config "$config" --threads "$threads" "$@" \
    >"$log" 2>&1 || rc=$?
  cat "$log"
  echo "== $name: troupe train exited $rc after $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || exit 1
}

# The final held-out accuracy in percent, from the log.
final_accuracy() {
  sed -n 's/^eval at step [0-9]*: addition accuracy \([0-9.]*\)%.*/\1/p' "$log" | tail -n 1
}
# The final training loss, from the summary line "done: ... loss A -> B".
final_loss() {
  sed -n 's/^done: .*loss [0-9.]* -> \([0-9.]*\).*/\1/p' "$log" | tail -n 1
}
# The final validation loss, from the summary line "validation loss X ...".
final_validation_loss() {
  sed -n 's/^  validation loss \([0-9.]*\) .*/\1/p' "$log" | tail -n 1
}
# at_least VALUE MIN WHAT / below VALUE MAX WHAT: the check, printed.
at_least() {
  [ -n "$1" ] || { echo "FAIL: $name printed no $3"; exit 1; }
  awk -v v="$1" -v m="$2" 'BEGIN { exit !(v >= m) }' ||
    { echo "FAIL: $name: $3 $1 < $2"; exit 1; }
  echo "PASS: $name: $3 $1 >= $2"
}
below() {
  [ -n "$1" ] || { echo "FAIL: $name printed no $3"; exit 1; }
  awk -v v="$1" -v m="$2" 'BEGIN { exit !(v < m) }' ||
    { echo "FAIL: $name: $3 $1 >= $2"; exit 1; }
  echo "PASS: $name: $3 $1 < $2"
}

# A head and two workers of 1 CPU each, as `troupe head` / `troupe worker` on this machine;
# sets $head and $state.
start_cluster() {
  state=$(mktemp -d)
  timeout -s KILL $((limit + 60)) "$troupe" head --port 0 --http-port 0 --state-dir "$state" \
    >"$state/head.log" 2>&1 &
  pids+=($!)
  head=""
  for _ in $(seq 400); do
    head=$(sed -n 's/^troupe head listening on //p' "$state/head.log")
    [ -n "$head" ] && break
    sleep 0.05
  done
  [ -n "$head" ] || { cat "$state/head.log"; exit 1; }
  for w in 1 2; do
    timeout -s KILL $((limit + 60)) "$troupe" worker --head "$head" --token-file "$state/token" \
      --resources CPU=1 --threads "$threads" >"$state/worker$w.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 400); do
    joined=$(cat "$state"/worker*.log | grep -c "joined the cluster" || true)
    [ "$joined" -ge 2 ] && break
    sleep 0.05
  done
}

out=$(sed -n 's/.*"output_dir": *"\([^"]*\)".*/\1/p' "$config")
[ -z "$out" ] || rm -rf "$out"
case "$name" in
  llama_finetune)
    rm -rf runs/llama_addition/hf
    timeout -s KILL 300 "$troupe" export --checkpoint runs/llama_addition/checkpoints \
      --output runs/llama_addition/hf
    train --local 2
    at_least "$(final_accuracy)" 95 "held-out accuracy (%)"
    ;;
  elastic)
    start_cluster
    train --head "$head" --token-file "$state/token"
    at_least "$(final_accuracy)" 95 "held-out accuracy (%)"
    ;;
  shakespeare_char)
    timeout -s KILL 300 "$source_dir"/scripts/fetch_text.sh data
    val=data/shakespeare/hamlet.txt,data/shakespeare/julius_caesar.txt
    val=$val,data/shakespeare/tempest.txt,data/shakespeare/sonnets.txt
    timeout -s KILL 300 "$troupe" data prepare --tokenizer bytes --val-files "$val" \
      --output data/shakespeare_char data/shakespeare/*.txt
    train --local 2
    below "$(final_validation_loss)" 1.9501 "final validation loss (nats a character)"
    ;;
  text_ddp)
    mkdir -p data
    timeout -s KILL 300 "$troupe" data prepare --output data/tinytext "$source_dir"/docs/*.md
    train --local 2
    below "$(final_loss)" 1.5 "final training loss"
    ;;
  *)
    train --local 2
    at_least "$(final_accuracy)" 95 "held-out accuracy (%)"
    ;;
esac
