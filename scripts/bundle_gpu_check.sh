#!/usr/bin/env bash
# Packs the NCCL backend's test binary (transport_nccl_test, label gpu) with
# the shared libraries it loads, for a GPU machine that has the CUDA driver
# and NCCL but not troupe's build dependencies; scripts/gpu_check.sh runs it
# there.
#
#   scripts/bundle_gpu_check.sh BUILD_DIR OUTDIR
#
# BUILD_DIR is a build tree where the test was built (configure with the CUDA
# toolkit and NCCL present, then `ninja -C BUILD_DIR transport_nccl_test`).
# OUTDIR is emptied and gets:
#
#   bin/transport_nccl_test   the test binary
#   lib/*.so*                 every library it needs (ldd), under the names it
#                             asks for, except glibc's own (libc, libm,
#                             libpthread, libdl, librt, ld-linux, ...), the
#                             CUDA driver (libcuda) and NCCL (libnccl: the GPU
#                             machine's own is used)
#   MANIFEST                  where each file came from, and the newest glibc
#                             symbol version the bundle needs
#
# so that `LD_LIBRARY_PATH=OUTDIR/lib:<NCCL's folder> OUTDIR/bin/transport_nccl_test`
# runs. The binary's build-tree RUNPATH is removed when patchelf is installed;
# otherwise it stays, harmlessly (its folders do not exist elsewhere, and
# LD_LIBRARY_PATH is searched first). Fails if the bundle exceeds 60 MB.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
build_dir=$1
out=$2
binary="$build_dir/tests/transport_nccl_test"
if [ ! -x "$binary" ]; then
  echo "bundle: $binary not found: configure $build_dir with CUDA and NCCL present," \
       "then run: ninja -C $build_dir transport_nccl_test" >&2
  exit 1
fi

# glibc's own libraries, the CUDA driver, and NCCL: present on the GPU machine.
excluded='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnss_[a-z]+|libcuda|libnccl)\.so'

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$binary" "$out/bin/"
if command -v patchelf >/dev/null; then
  patchelf --remove-rpath "$out/bin/transport_nccl_test"
fi

manifest="$out/MANIFEST"
{
  echo "transport_nccl_test bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "source: $(git -C "$(dirname "$0")/.." describe --always --dirty 2>/dev/null || echo unknown)"
  echo "bin/transport_nccl_test <- $binary"
} >"$manifest"

missing=()
skipped=()
while read -r name arrow path _; do
  [ "$arrow" = "=>" ] || continue  # the vdso and the loader have no "=>"
  if [[ $name =~ $excluded ]]; then
    skipped+=("$name")
    continue
  fi
  if [ "$path" = "not" ]; then
    missing+=("$name")
    continue
  fi
  cp -L "$path" "$out/lib/$name"
  echo "lib/$name <- $path" >>"$manifest"
done < <(ldd "$binary")
if [ ${#missing[@]} -ne 0 ]; then
  echo "bundle: ldd cannot find ${missing[*]} for $binary" >&2
  exit 1
fi

glibc=$(objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "not bundled (the GPU machine's own): ${skipped[*]}"
  echo "needs glibc: ${glibc#GLIBC_} or newer"
} >>"$manifest"

bytes=$(du -sb "$out" | cut -f1)
echo "bundle: $out: $(find "$out/lib" -type f | wc -l) libraries, $(du -sh "$out" | cut -f1)," \
     "needs glibc ${glibc#GLIBC_}; not bundled: ${skipped[*]}"
if [ "$bytes" -gt $((60 * 1000 * 1000)) ]; then
  echo "bundle: $out is $bytes bytes, over the 60 MB limit" >&2
  exit 1
fi
