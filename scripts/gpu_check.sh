#!/usr/bin/env bash
# Runs the GPU tests on a machine with a CUDA GPU, from a bundle made on the
# build machine by scripts/bundle_gpu_check.sh: the NCCL backend's
# (transport_nccl_test) and the CUDA layers' (nn_cuda_layers_test), whichever
# the bundle holds. The GPU machine needs the CUDA driver, NCCL and cuBLAS, not
# troupe's build dependencies. Run from the repository root:
#
#   scripts/gpu_check.sh [BUNDLE [GTEST_ARGS...]]   (BUNDLE: build-nccl/gpu-bundle)
#
# Prints nvidia-smi, the glibc, NCCL and cuBLAS it found, then runs every test
# with TROUPE_REQUIRE_GPU=1 (a test that finds no device fails instead of
# skipping; set TROUPE_REQUIRE_GPU=0 for a dry run without a GPU), the 1-rank
# 256 MiB allreduce timing and the layers' timings among them, and exits
# non-zero if any test binary did. GTEST_ARGS, when given, go to every binary
# and replace the default selection (all tests, NCCL's shared-device one in a
# second process). The output also goes to $GPU_CHECK_LOG (default
# /tmp/troupe-gpu-check.log). Within 4 minutes, with the time limits below
# (120 s + 45 s for the NCCL tests, 60 s for the layers).
#
# NCCL and cuBLAS are not in the bundle. NCCL: the first libnccl.so.2 in
# $NCCL_LIB_DIR, /usr/local/cuda*/lib64 (or lib), the Python package
# nvidia.nccl (PyTorch's NCCL) or the loader's cache. cuBLAS: the first folder
# with libcublas.so.13 and libcublasLt.so.13 in $CUBLAS_LIB_DIR,
# /usr/local/cuda*/lib64 (or lib), PyTorch's CUDA 13 packages (nvidia/cu13/lib,
# or nvidia/cublas/lib) or the loader's cache. NCCL_DEBUG defaults to WARN.
set -uo pipefail

bundle=${1:-build-nccl/gpu-bundle}
shift || true
log=${GPU_CHECK_LOG:-/tmp/troupe-gpu-check.log}
nccl_test="$bundle/bin/transport_nccl_test"
layers_test="$bundle/bin/nn_cuda_layers_test"
if [ ! -f "$nccl_test" ] && [ ! -f "$layers_test" ]; then
  echo "gpu_check: neither $nccl_test nor $layers_test found; make the bundle on the build" \
       "machine with scripts/bundle_gpu_check.sh BUILD_DIR $bundle" >&2
  exit 2
fi
bundle=$(cd "$bundle" && pwd)
nccl_test="$bundle/bin/transport_nccl_test"
layers_test="$bundle/bin/nn_cuda_layers_test"
for binary in "$nccl_test" "$layers_test"; do
  if [ -f "$binary" ] && [ ! -x "$binary" ]; then chmod +x "$binary"; fi  # a copy may have lost the mode bits
done

# The folder of the first of $1 found in $2 and the usual places; $3... are
# folders under each of the Python nvidia packages' paths to look in.
find_library() {
  local lib=$1 env_dir=$2 dir python sub
  shift 2
  for dir in $env_dir /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/lib; do
    if [ -e "$dir/$lib" ]; then
      echo "$dir"
      return
    fi
  done
  # PyTorch's pip packages; nvidia and its subpackages may be namespace packages (no __file__).
  for python in python3 python; do
    for dir in $("$python" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null); do
      for sub in "$@"; do
        if [ -e "$dir/$sub/$lib" ]; then
          echo "$dir/$sub"
          return
        fi
      done
    done
  done
  dir=$(ldconfig -p 2>/dev/null | awk -v lib="$lib" '$1 == lib {print $NF; exit}')
  if [ -n "$dir" ]; then dirname "$dir"; fi
}

# Runs one test binary with a time limit; its output also goes to $log.tests.
run_test() {
  local limit=$1 binary=$2 code
  shift 2
  echo "== $(basename "$binary")${*:+ $*}"
  timeout "$limit" "$binary" --gtest_brief=0 "$@" 2>&1 | tee -a "$log.tests"
  code=${PIPESTATUS[0]}
  if [ "$code" -eq 124 ]; then echo "gpu_check: $(basename "$binary") timed out after $limit s"; fi
  return "$code"
}

{
  echo "== nvidia-smi"
  nvidia-smi || echo "gpu_check: nvidia-smi failed"

  echo "== libraries"
  echo "glibc here: $(ldd --version 2>&1 | head -1)"
  grep -E "^(GPU check bundle|source|needs glibc)" "$bundle/MANIFEST" 2>/dev/null
  dirs="$bundle/lib"
  status=0
  if [ -f "$nccl_test" ]; then
    nccl_dir=$(find_library libnccl.so.2 "${NCCL_LIB_DIR:-}" nccl/lib)
    if [ -n "$nccl_dir" ]; then
      echo "NCCL: $(readlink -f "$nccl_dir/libnccl.so.2")"
      dirs="$dirs:$nccl_dir"
    else
      echo "gpu_check: no libnccl.so.2 found (set NCCL_LIB_DIR to its folder)"
      status=1
    fi
  fi
  if [ -f "$layers_test" ]; then
    cublas_dir=$(find_library libcublas.so.13 "${CUBLAS_LIB_DIR:-}" cu13/lib cublas/lib)
    if [ -n "$cublas_dir" ]; then
      echo "cuBLAS: $(readlink -f "$cublas_dir/libcublas.so.13")"
      dirs="$dirs:$cublas_dir"
    else
      echo "gpu_check: no libcublas.so.13 found (set CUBLAS_LIB_DIR to its folder)"
      status=1
    fi
  fi
  export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for binary in "$nccl_test" "$layers_test"; do
    if [ -f "$binary" ] && ldd "$binary" | grep "not found"; then
      echo "gpu_check: libraries above are missing on this machine for $(basename "$binary")"
      status=1
    fi
  done
  if [ "$status" -ne 0 ]; then exit "$status"; fi
  if [ -f "$nccl_test" ]; then
    "$nccl_test" --gtest_filter='NcclOptionsTest.ReportsTheLibraryVersion' --gtest_brief=1 |
      grep "NCCL library version"
  fi

  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export TROUPE_REQUIRE_GPU=${TROUPE_REQUIRE_GPU:-1}
  : >"$log.tests"
  if [ -f "$nccl_test" ]; then
    # The shared-device test (NCCL refusing two ranks on one GPU) goes last, in
    # a process of its own: a failed initialization may leave NCCL threads behind.
    if [ $# -eq 0 ]; then
      run_test 120 "$nccl_test" '--gtest_filter=-NcclSharedDeviceTest.*' || status=$?
      run_test 45 "$nccl_test" '--gtest_filter=NcclSharedDeviceTest.*' || status=$?
    else
      run_test 120 "$nccl_test" "$@" || status=$?
    fi
    echo "gpu_check: transport_nccl_test done (status so far $status)"
  fi
  if [ -f "$layers_test" ]; then
    run_test 60 "$layers_test" "$@" || status=$?
    echo "gpu_check: nn_cuda_layers_test done (status so far $status)"
  fi
  echo "== timing"
  grep -h -E "nccl allreduce, 1 rank|\[ timing \]" "$log.tests" || echo "(no timing: the tests did not run)"
  echo "gpu_check: exiting with $status"
  exit "$status"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
