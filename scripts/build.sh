#!/usr/bin/env bash
# Configures and builds troupe (Release) into build/. Extra arguments go to cmake.
# TROUPE_BUILD_TARGETS: build only these ninja targets (the demo: "troupe"); default all.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >build.configure.log 2>&1 || {
  cat build.configure.log >&2
  exit 1
}
grep -E "^-- troupe:" build.configure.log || true
# shellcheck disable=SC2086  # a list of targets
ninja -C build ${TROUPE_BUILD_TARGETS:-}
