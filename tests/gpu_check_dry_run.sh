#!/usr/bin/env bash
# The GPU check's scripts, run dry where there is no GPU (so that they do not rot between the
# runs on a GPU machine): bundles BUILD_DIR, then runs scripts/gpu_check.sh on the bundle with
# TROUPE_REQUIRE_GPU=0 - the gpu tests skip, the trainings run on the CPU, the bench says it has
# no device - and checks that every step reported and none failed.
#
#   tests/gpu_check_dry_run.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
source_dir=$1
build_dir=$2
work=$3
if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check_dry_run: this machine has a GPU: run scripts/gpu_check.sh itself"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
cd "$source_dir"
scripts/bundle_gpu_check.sh "$build_dir" "$work/bundle"
TROUPE_REQUIRE_GPU=0 scripts/gpu_check.sh "$work/bundle.tar.xz" "$work/out"
summary="$work/out/summary.txt"
for step in "gpu tests (" "train on one GPU: ok" "train two ranks sharing one GPU: ok" "gpu_bench: ok"; do
  grep -qF "$step" "$summary" || { echo "gpu_check_dry_run: no \"$step\" in $summary"; exit 1; }
done
grep -q "gpu tests: [0-9]* run, 0 failed" "$summary" || { echo "gpu_check_dry_run: a gpu test failed"; exit 1; }
echo "gpu_check_dry_run: every step ran"
