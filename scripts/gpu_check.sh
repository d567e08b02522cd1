#!/usr/bin/env bash
# The GPU check: on a machine with a CUDA GPU, runs troupe's GPU tests, trains on the GPU, and
# benchmarks against PyTorch, writing what it saw to a folder. Run from the repository root:
#
#   scripts/gpu_check.sh [SOURCE [OUT]]
#
# SOURCE is a build tree (then `ctest -L gpu` runs there), a bundle folder or a bundle's .tar.xz
# made by scripts/bundle_gpu_check.sh (for a GPU machine without troupe's build dependencies);
# default: build-gpu/gpu-bundle.tar.xz, else build/. OUT (default gpu-check-results/) gets:
#
#   summary.txt        one line per step with its status and time, and the figures
#   nvidia-smi.txt     the GPUs and driver
#   tests.log          the GPU tests, with TROUPE_REQUIRE_GPU=1 (a test that finds no device fails)
#   train-1gpu.log     `troupe train --local 1` on examples/configs/addition_single.json: one GPU
#   train-shared.log   `troupe train --local 2` on addition_ddp.json: two ranks sharing one GPU
#                      (CUDA_VISIBLE_DEVICES narrowed to the first GPU)
#   gpu_bench.log/.json  bench/gpu_bench: GPT-2 small, tokens/s and MFU beside PyTorch's
#
# Each step has a time limit (tests 240 s, each training 75 s, the bench 150 s): the whole check
# ends within 8 minutes. Exits non-zero if any step failed. NCCL and cuBLAS come from the GPU
# machine: $NCCL_LIB_DIR / $CUBLAS_LIB_DIR, /usr/local/cuda*/lib64, PyTorch's pip packages, or
# the loader's cache. TROUPE_REQUIRE_GPU=0 makes a dry run where there is no GPU.
set -uo pipefail

source=${1:-}
out=${2:-gpu-check-results}
if [ -z "$source" ]; then
  source="build"
  [ -f "build-gpu/gpu-bundle.tar.xz" ] && source="build-gpu/gpu-bundle.tar.xz"
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# Where things are: a build tree, or a bundle (unpacked when it is a tarball).
if [ -f "$source/CTestTestfile.cmake" ]; then
  mode=build
  build=$(cd "$source" && pwd)
  troupe="$build/cli/troupe"
  bench="$build/bench/gpu_bench"
  configs="$PWD/examples/configs"
else
  mode=bundle
  if [[ $source == *.tar.xz ]]; then
    unpack=$(mktemp -d /tmp/troupe-gpu-bundle-XXXXXX)
    tar -C "$unpack" -xJf "$source" || { note "gpu_check: cannot unpack $source"; exit 2; }
    source=$(find "$unpack" -mindepth 1 -maxdepth 1 -type d | head -1)
  fi
  bundle=$(cd "$source" && pwd)
  troupe="$bundle/bin/troupe"
  bench="$bundle/bin/gpu_bench"
  configs="$bundle/configs"
  chmod +x "$bundle"/bin/* 2>/dev/null  # a copy may have lost the mode bits
fi
note "gpu_check: $mode at $source, results in $out"

# The folder of the first $1 found in $2 and the usual places; $3... under PyTorch's nvidia/.
find_library() {
  local lib=$1 env_dir=$2 dir python sub
  shift 2
  for dir in $env_dir /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/lib; do
    if [ -e "$dir/$lib" ]; then echo "$dir"; return; fi
  done
  for python in python3 python; do
    for dir in $("$python" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
      for sub in "$@"; do
        if [ -e "$dir/$sub/$lib" ]; then echo "$dir/$sub"; return; fi
      done
    done
  done
  dir=$(ldconfig -p 2>/dev/null | awk -v lib="$lib" '$1 == lib {print $NF; exit}')
  if [ -n "$dir" ]; then dirname "$dir"; fi
}

dirs=""
[ "$mode" = bundle ] && dirs="$bundle/lib"
for spec in "libnccl.so.2:${NCCL_LIB_DIR:-}:nccl/lib" \
            "libcublas.so.13:${CUBLAS_LIB_DIR:-}:cu13/lib cublas/lib"; do
  IFS=: read -r lib env_dir subs <<<"$spec"
  # shellcheck disable=SC2086  # the sub-folders are a list
  found=$(find_library "$lib" "$env_dir" $subs)
  if [ -n "$found" ]; then
    note "library: $lib in $found"
    dirs="${dirs:+$dirs:}$found"
  else
    note "library: $lib not found (set NCCL_LIB_DIR / CUBLAS_LIB_DIR): steps needing it fail"
  fi
done
export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TROUPE_REQUIRE_GPU=${TROUPE_REQUIRE_GPU:-1}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TROUPE_GPU_BENCH_TORCH_SCRIPT=${TROUPE_GPU_BENCH_TORCH_SCRIPT:-$PWD/bench/gpu_bench_torch.py}
if [ "$mode" = bundle ]; then
  # Tests that start a local cluster run the bundle's troupe and actor library.
  export TROUPE_BINARY="$troupe"
  export TROUPE_DEVICE_LIB="$bundle/lib/libtroupe_device_reducer_actors.so"
  export TROUPE_DEVICE_LIB_DIR="$bundle/lib"
fi
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || note "nvidia-smi failed (no driver?)"

status=0
# step NAME LIMIT_S LOG COMMAND...: runs it with a time limit, notes its status and time.
step() {
  local name=$1 limit=$2 log=$3 start code
  shift 3
  start=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  code=$?
  local took=$(($(date +%s) - start))
  if [ "$code" -eq 0 ]; then
    note "$name: ok (${took} s)"
  else
    if [ "$code" -eq 124 ]; then
      note "$name: timed out after $limit s"
    else
      note "$name: FAILED (exit $code, ${took} s): see $log"
    fi
    status=1
  fi
}

# shellcheck disable=SC2317  # run by name in a bash -c below
run_bundled_tests() {
  local code=0 name binary
  while IFS=$'\t' read -r name binary rest; do
    IFS=$'\t' read -r -a args <<<"$rest"
    echo "== test: $name"
    "$bundle/bin/$binary" "${args[@]}" || { echo "== failed: $name"; code=1; }
  done <"$bundle/tests.tsv"
  return "$code"
}

if [ "$mode" = build ]; then
  step "gpu tests (ctest -L gpu)" 240 "$out/tests.log" ctest --test-dir "$build" -L gpu --output-on-failure
else
  step "gpu tests ($(wc -l <"$bundle/tests.tsv") from the bundle)" 240 "$out/tests.log" \
    env bundle="$bundle" bash -c "$(declare -f run_bundled_tests); run_bundled_tests"
fi
if [ "$mode" = build ]; then
  grep -E 'tests passed|tests failed' "$out/tests.log" | tee -a "$summary"
else
  note "gpu tests: $(grep -c '^== test: ' "$out/tests.log") run, $(grep -c '^== failed: ' "$out/tests.log")" \
       "failed, $(grep -c 'SKIPPED \] 1 test' "$out/tests.log") skipped"
fi

# On the GPU, or fail saying why (a dry run, TROUPE_REQUIRE_GPU=0, takes what the workers offer).
device=cuda
[ "$TROUPE_REQUIRE_GPU" = 1 ] || device=auto
step "train on one GPU" 75 "$out/train-1gpu.log" \
  "$troupe" train --config "$configs/addition_single.json" --local 1 --steps 100 --device "$device" \
  --output "$out/train-1gpu"
first_gpu=$(nvidia-smi --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
step "train two ranks sharing one GPU" 75 "$out/train-shared.log" \
  env CUDA_VISIBLE_DEVICES="${first_gpu:-0}" \
  "$troupe" train --config "$configs/addition_ddp.json" --local 2 --steps 100 --device "$device" \
  --output "$out/train-shared"
for log in "$out/train-1gpu.log" "$out/train-shared.log"; do
  { grep -m1 "parameters, on" "$log"; grep -E "tok/s" "$log" | tail -1; } |
    sed "s|^|$(basename "$log"): |" >>"$summary"
done

step "gpu_bench" 150 "$out/gpu_bench.log" \
  "$bench" --configs gpt2-124m,llama-124m --batch 4 --seq 1024 --steps 10 --warmup 3 --repeat 3 \
  --json "$out/gpu_bench.json"
grep -E "tokens/s|MFU|ratio|skipped" "$out/gpu_bench.log" >>"$summary"

note "gpu_check: exiting with $status"
exit "$status"
