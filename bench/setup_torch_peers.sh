#!/usr/bin/env bash
# The PyTorch peers of the benchmarks (ddp_bench_torch.py, gpt_bench_torch.py, zero_bench_peer.py):
# a virtual environment with CPU PyTorch (tests/reference/setup_reference_env.sh's, with
# transformers) and DeepSpeed.
#
#   bench/setup_torch_peers.sh [VENV]    VENV: default /tmp/torchenv, where the benches look first
#
# Idempotent: installs only what is missing. Exits 0 with a message even when it cannot install
# (no network, no python3-venv): the benchmarks then skip their PyTorch peers. Where the CPU wheel
# index cannot be reached, torch comes from PyPI (its CUDA build: about 5 GB with its libraries).
set -u
venv=${1:-/tmp/torchenv}
py=$venv/bin/python
say() { echo "setup_torch_peers: $*" >&2; }
give_up() { say "$*; the benchmarks will skip their PyTorch peers"; exit 0; }
pip_install() { "$py" -m pip install -q --disable-pip-version-check "$@"; }

# The virtual environment with torch (and transformers) is the tests' reference one.
"$(dirname "$0")/../tests/reference/setup_reference_env.sh" "$venv"
"$py" -c 'import torch' >/dev/null 2>&1 || give_up "no torch in $venv"
if ! DS_ACCELERATOR=cpu "$py" -c 'import deepspeed' >/dev/null 2>&1; then
  pip_install deepspeed==0.19.8 || pip_install deepspeed || give_up "cannot install deepspeed"
fi
say "ready: $venv: $(DS_ACCELERATOR=cpu "$py" -c \
  'import torch, deepspeed; print("torch", torch.__version__, "deepspeed", deepspeed.__version__)' \
  2>/dev/null)"
