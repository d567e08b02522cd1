#!/usr/bin/env bash
# Quick start, second command: sets up this machine, builds everything, and
# runs every test: formatting, the full suite (unit, layering, benchmark smoke
# runs), and the core suite again under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

echo "== format check (clang-format)"
mapfile -t sources < <(git ls-files '*.h' '*.cc' '*.cu')
clang-format --dry-run --Werror "${sources[@]}"
echo "format: ${#sources[@]} files ok"

echo "== build (Release, warnings as errors)"
./scripts/build.sh

echo "== tests"
ctest --test-dir build --output-on-failure -j2

echo "== core tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_SANITIZE=thread \
  -DTROUPE_CUDA=OFF -DTROUPE_BUILD_BENCHMARKS=OFF -DTROUPE_BUILD_EXAMPLES=OFF >build-tsan.configure.log 2>&1 || {
  cat build-tsan.configure.log >&2
  exit 1
}
ninja -C build-tsan
ctest --test-dir build-tsan -L core --output-on-failure -j2
