#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs on a GPU machine that has the CUDA driver, NCCL and cuBLAS
# but not troupe's build dependencies: the `troupe` executable, bench/gpu_bench, every test
# binary of `ctest -L gpu`, the libraries they and troupe's CUDA and NCCL backends load, and the
# example configs.
#
#   scripts/bundle_gpu_check.sh BUILD_DIR OUTDIR
#
# BUILD_DIR is a build tree configured with the CUDA toolkit (and NCCL) present and built
# (`ninja -C BUILD_DIR`). OUTDIR is emptied and gets:
#
#   bin/                      troupe, gpu_bench and the gpu-labelled test binaries
#   lib/*.so*                 every library they need (ldd), troupe's backends that are loaded
#                             rather than linked (libtroupe_nn_cuda, the NCCL backend) and theirs,
#                             except glibc's own, the CUDA driver (libcuda), NCCL (libnccl) and
#                             cuBLAS (libcublas, libcublasLt: ~600 MB): the GPU machine's are used
#   tests.tsv                 one line per test of `ctest -L gpu`: name, binary, its arguments
#   configs/                  examples/configs
#   MANIFEST                  where each file came from, and the newest glibc symbol it needs
#
# and OUTDIR.tar.xz of it (what travels: a device machine takes 64 MiB of files). The binaries'
# build-tree RUNPATH is removed when patchelf is installed; otherwise it stays, harmlessly.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)

# The gpu-labelled tests as ctest runs them: "name<TAB>binary<TAB>args...".
tests_tsv=$(ctest --test-dir "$build_dir" -L gpu --show-only=json-v1 | python3 -c '
import json, sys
for t in json.load(sys.stdin)["tests"]:
    cmd = t.get("command") or []
    if cmd:
        print("\t".join([t["name"], cmd[0]] + cmd[1:]))
')
if [ -z "$tests_tsv" ]; then
  echo "bundle: $build_dir has no test labelled gpu: configure it with the CUDA toolkit" >&2
  exit 1
fi
mapfile -t binaries < <(printf '%s\n' "$tests_tsv" | cut -f2 | sort -u)
binaries+=("$build_dir/cli/troupe")
[ -x "$build_dir/bench/gpu_bench" ] && binaries+=("$build_dir/bench/gpu_bench")
for binary in "${binaries[@]}"; do
  if [ ! -x "$binary" ]; then
    echo "bundle: $binary not found: run ninja -C $build_dir" >&2
    exit 1
  fi
done
# Loaded with dlopen from beside libtroupe_nn (libtroupe_core): not in any ldd.
plugins=()
while IFS= read -r -d '' plugin; do plugins+=("$plugin"); done < <(
  find "$build_dir/nn" "$build_dir/transport" "$build_dir/core" -maxdepth 4 \
    \( -name 'libtroupe_nn_cuda.so*' -o -name 'libtroupe_nccl*.so*' \) -type f -print0 2>/dev/null)

# glibc's own libraries, the CUDA driver, NCCL and cuBLAS: present on the GPU machine.
excluded='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnss_[a-z]+|libcuda|libnccl|libcublas|libcublasLt)\.so'

rm -rf "$out" "$out.tar.xz"
mkdir -p "$out/bin" "$out/lib" "$out/configs"
manifest="$out/MANIFEST"
{
  echo "GPU check bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "source: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
} >"$manifest"
for binary in "${binaries[@]}"; do
  cp "$binary" "$out/bin/"
  if command -v patchelf >/dev/null; then patchelf --remove-rpath "$out/bin/$(basename "$binary")"; fi
  echo "bin/$(basename "$binary") <- $binary" >>"$manifest"
done
for plugin in "${plugins[@]}"; do
  name=$(basename "$plugin")
  cp -L "$plugin" "$out/lib/$name"
  echo "lib/$name <- $plugin (loaded, not linked)" >>"$manifest"
done
printf '%s\n' "$tests_tsv" | awk -F'\t' 'BEGIN{OFS="\t"} {n=split($2, p, "/"); $2=p[n]; print}' \
  >"$out/tests.tsv"
cp "$root"/examples/configs/*.json "$out/configs/"

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
  [ -e "$out/lib/$name" ] && continue  # needed by more than one
  cp -L "$path" "$out/lib/$name"
  echo "lib/$name <- $path" >>"$manifest"
done < <(for f in "${binaries[@]}" "${plugins[@]}"; do ldd "$f"; done)
if [ ${#missing[@]} -ne 0 ]; then
  echo "bundle: ldd cannot find ${missing[*]}" >&2
  exit 1
fi

glibc=$(objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
{
  echo "not bundled (the GPU machine's own): ${skipped[*]}"
  echo "needs glibc: ${glibc#GLIBC_} or newer"
} >>"$manifest"
tar -C "$(dirname "$out")" -cJf "$out.tar.xz" "$(basename "$out")"
echo "bundle: $out: $(wc -l <"$out/tests.tsv") tests in ${#binaries[@]} binaries," \
     "$(find "$out/lib" -type f | wc -l) libraries, $(du -sh "$out" | cut -f1)" \
     "($(du -h "$out.tar.xz" | cut -f1) as $out.tar.xz), needs glibc ${glibc#GLIBC_};" \
     "not bundled: ${skipped[*]}"
if [ "$(stat -c %s "$out.tar.xz")" -gt $((60 * 1024 * 1024)) ]; then
  echo "bundle: $out.tar.xz is over 60 MiB: it would not travel to a device machine" >&2
  exit 1
fi
