#!/usr/bin/env bash
# Packs the GPU tests - the NCCL backend's (transport_nccl_test, label gpu) and
# the CUDA layers' (nn_cuda_layers_test, label nn) - with the shared libraries
# they load, for a GPU machine that has the CUDA driver, NCCL and cuBLAS but
# not troupe's build dependencies; scripts/gpu_check.sh runs them there.
#
#   scripts/bundle_gpu_check.sh BUILD_DIR OUTDIR [TEST...]
#
# BUILD_DIR is a build tree where the tests were built (configure with the
# CUDA toolkit and NCCL present, then
# `ninja -C BUILD_DIR transport_nccl_test nn_cuda_layers_test`). TEST names
# the test binaries to pack (default: both). OUTDIR is emptied and gets:
#
#   bin/<TEST>                the test binaries
#   lib/*.so*                 every library they need (ldd), under the names
#                             they ask for, except glibc's own (libc, libm,
#                             libpthread, libdl, librt, ld-linux, ...), the
#                             CUDA driver (libcuda), NCCL (libnccl) and cuBLAS
#                             (libcublas, libcublasLt: ~600 MB): the GPU
#                             machine's own are used
#   MANIFEST                  where each file came from, and the newest glibc
#                             symbol version the bundle needs
#
# so that `LD_LIBRARY_PATH=OUTDIR/lib:<NCCL's folder>:<cuBLAS's folder>
# OUTDIR/bin/<TEST>` runs. The binaries' build-tree RUNPATH is removed when
# patchelf is installed; otherwise it stays, harmlessly (its folders do not
# exist elsewhere, and LD_LIBRARY_PATH is searched first). Fails if the bundle
# exceeds 80 MB.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR OUTDIR [TEST...]" >&2
  exit 2
fi
build_dir=$1
out=$2
shift 2
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then tests=(transport_nccl_test nn_cuda_layers_test); fi
for test in "${tests[@]}"; do
  if [ ! -x "$build_dir/tests/$test" ]; then
    echo "bundle: $build_dir/tests/$test not found: configure $build_dir with CUDA and NCCL" \
         "present, then run: ninja -C $build_dir ${tests[*]}" >&2
    exit 1
  fi
done

# glibc's own libraries, the CUDA driver, NCCL and cuBLAS: present on the GPU machine.
excluded='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnss_[a-z]+|libcuda|libnccl|libcublas|libcublasLt)\.so'

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
manifest="$out/MANIFEST"
{
  echo "GPU check bundle (${tests[*]}), made $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "source: $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
} >"$manifest"
for test in "${tests[@]}"; do
  cp "$build_dir/tests/$test" "$out/bin/"
  if command -v patchelf >/dev/null; then
    patchelf --remove-rpath "$out/bin/$test"
  fi
  echo "bin/$test <- $build_dir/tests/$test" >>"$manifest"
done

missing=()
skipped=()
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue  # the vdso and the loader have no "=>"
  if [[ $name =~ $excluded ]]; then
    [[ " ${skipped[*]} " == *" $name "* ]] || skipped+=("$name")
    continue
  fi
  if [ "$path" = "not" ]; then
    missing+=("$name")
    continue
  fi
  [ -e "$out/lib/$name" ] && continue  # needed by more than one binary
  cp -L "$path" "$out/lib/$name"
  echo "lib/$name <- $path" >>"$manifest"
done < <(for test in "${tests[@]}"; do ldd "$build_dir/tests/$test"; done)
if [ ${#missing[@]} -ne 0 ]; then
  echo "bundle: ldd cannot find ${missing[*]} for ${tests[*]}" >&2
  exit 1
fi

glibc=$(objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "not bundled (the GPU machine's own): ${skipped[*]}"
  echo "needs glibc: ${glibc#GLIBC_} or newer"
} >>"$manifest"

bytes=$(du -sb "$out" | cut -f1)
echo "bundle: $out: ${tests[*]}, $(find "$out/lib" -type f | wc -l) libraries," \
     "$(du -sh "$out" | cut -f1), needs glibc ${glibc#GLIBC_}; not bundled: ${skipped[*]}"
if [ "$bytes" -gt $((80 * 1000 * 1000)) ]; then
  echo "bundle: $out is $bytes bytes, over the 80 MB limit" >&2
  exit 1
fi
