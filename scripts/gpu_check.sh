#!/usr/bin/env bash
# Runs the NCCL backend's tests (transport_nccl_test, label gpu) on a machine
# with a CUDA GPU, from a bundle made on the build machine by
# scripts/bundle_gpu_check.sh: the GPU machine needs the CUDA driver and NCCL,
# not troupe's build dependencies. Run from the repository root:
#
#   scripts/gpu_check.sh [BUNDLE [GTEST_ARGS...]]   (BUNDLE: build-nccl/gpu-bundle)
#
# Prints nvidia-smi, the glibc and NCCL it found, then runs every test with
# TROUPE_REQUIRE_GPU=1 (a test that finds no device fails instead of skipping;
# set TROUPE_REQUIRE_GPU=0 for a dry run without a GPU), the 1-rank 256 MiB
# allreduce timing among them, and exits with the tests' status. GTEST_ARGS,
# when given, replace the default selection (all tests, the shared-device one
# in a second process). The output also goes to $GPU_CHECK_LOG (default
# /tmp/troupe-gpu-check.log). Within 9 minutes, with the time limits below.
#
# NCCL is not in the bundle: the first libnccl.so.2 in $NCCL_LIB_DIR,
# /usr/local/cuda*/lib64 (or lib), the Python package nvidia.nccl (PyTorch's
# NCCL) or the loader's cache is used. NCCL_DEBUG defaults to WARN.
set -uo pipefail

bundle=${1:-build-nccl/gpu-bundle}
shift || true
binary="$bundle/bin/transport_nccl_test"
log=${GPU_CHECK_LOG:-/tmp/troupe-gpu-check.log}
if [ ! -f "$binary" ]; then
  echo "gpu_check: $binary not found; make it on the build machine with" \
       "scripts/bundle_gpu_check.sh BUILD_DIR $bundle" >&2
  exit 2
fi
[ -x "$binary" ] || chmod +x "$binary"  # a copy may have lost the mode bits
bundle=$(cd "$bundle" && pwd)
binary="$bundle/bin/transport_nccl_test"

# The folder of the first libnccl.so.2 found.
find_nccl() {
  local dir
  for dir in ${NCCL_LIB_DIR:-} /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/cuda*/lib; do
    if [ -e "$dir/libnccl.so.2" ]; then
      echo "$dir"
      return
    fi
  done
  # PyTorch's NCCL. nvidia.nccl may be a namespace package (no __file__).
  for python in python3 python; do
    dir=$("$python" -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null) || continue
    if [ -e "$dir/libnccl.so.2" ]; then
      echo "$dir"
      return
    fi
  done
  dir=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
  if [ -n "$dir" ]; then dirname "$dir"; fi
}

{
  echo "== nvidia-smi"
  nvidia-smi || echo "gpu_check: nvidia-smi failed"

  echo "== libraries"
  echo "glibc here: $(ldd --version 2>&1 | head -1)"
  grep -E "^(source|needs glibc)" "$bundle/MANIFEST" 2>/dev/null
  nccl_dir=$(find_nccl)
  if [ -z "$nccl_dir" ]; then
    echo "gpu_check: no libnccl.so.2 found (set NCCL_LIB_DIR to its folder)" >&2
    exit 1
  fi
  echo "NCCL: $(readlink -f "$nccl_dir/libnccl.so.2")"
  export LD_LIBRARY_PATH="$bundle/lib:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ldd "$binary" | grep "not found"; then
    echo "gpu_check: libraries above are missing on this machine" >&2
    exit 1
  fi
  "$binary" --gtest_filter='NcclOptionsTest.ReportsTheLibraryVersion' --gtest_brief=1 |
    grep "NCCL library version"

  echo "== transport_nccl_test"
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  export TROUPE_REQUIRE_GPU=${TROUPE_REQUIRE_GPU:-1}
  # The shared-device test (NCCL refusing two ranks on one GPU) goes last, in
  # a process of its own: a failed initialization may leave NCCL threads behind.
  if [ $# -eq 0 ]; then
    set -- '--gtest_filter=-NcclSharedDeviceTest.*'
    isolated='NcclSharedDeviceTest.*'
  else
    isolated=
  fi
  timeout 420 "$binary" --gtest_brief=0 "$@" 2>&1 | tee "$log.tests"
  status=${PIPESTATUS[0]}
  if [ -n "$isolated" ]; then
    echo "== transport_nccl_test --gtest_filter=$isolated"
    timeout 120 "$binary" --gtest_brief=0 --gtest_filter="$isolated" 2>&1
    isolated_status=$?
    if [ "$status" -eq 0 ]; then status=$isolated_status; fi
  fi
  if [ "$status" -eq 124 ]; then echo "gpu_check: a test run timed out"; fi
  echo "== timing"
  grep -h "nccl allreduce, 1 rank" "$log.tests" || echo "(no timing: the test did not run)"
  echo "gpu_check: transport_nccl_test exited with $status"
  exit "$status"
} 2>&1 | tee "$log"
exit "${PIPESTATUS[0]}"
