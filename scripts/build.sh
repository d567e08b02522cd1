#!/usr/bin/env bash
# Configures and builds troupe (Release) into build/. Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >build.configure.log 2>&1 || {
  cat build.configure.log >&2
  exit 1
}
grep -E "^-- troupe:" build.configure.log || true
ninja -C build
