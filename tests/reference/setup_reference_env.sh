#!/usr/bin/env bash
# The Python side of the reference checks (tests/reference/hf_export_reference.py,
# tests/reference/tokenizer_reference.py) and of the benchmarks' peers: a virtual environment
# with CPU PyTorch, transformers and safetensors, tiktoken, sentencepiece, prometheus_client and
# tensorboard from PyPI.
#
#   tests/reference/setup_reference_env.sh [VENV]    VENV: default /tmp/torchenv, where the
#                                                    tests (and the benchmarks) look first
#
# Idempotent: installs only what is missing. Exits 0 with a message even when it cannot install
# (no network, no python3-venv): the tests that need these packages then skip, saying so.
set -u
venv=${1:-/tmp/torchenv}
py=$venv/bin/python
say() { echo "setup_reference_env: $*" >&2; }
give_up() { say "$*; the transformers reference check will be skipped"; exit 0; }
skip_part() { say "$*; the checks and benchmark peers that need it will be skipped"; }
pip_install() {
  "$py" -m pip install -q --disable-pip-version-check --retries 1 --timeout 60 "$@"
}

if ! "$py" -m pip --version >/dev/null 2>&1; then
  base=/usr/bin/python3
  [ -x "$base" ] || base=python3
  if ! "$base" -m venv "$venv" >/dev/null 2>&1; then
    { apt-get install -y python3-venv || { apt-get update && apt-get install -y python3-venv; }; } \
      >/dev/null 2>&1 || give_up "cannot install python3-venv"
    "$base" -m venv "$venv" || give_up "cannot create a virtual environment at $venv"
  fi
fi
# The tokenizer references and the tokenizer bench's peers: optional, each on its own,
# and installed before torch, which they do not need.
if ! "$py" -c 'import tiktoken' >/dev/null 2>&1; then
  pip_install tiktoken || skip_part "cannot install tiktoken"
fi
if ! "$py" -c 'import sentencepiece' >/dev/null 2>&1; then
  pip_install sentencepiece || skip_part "cannot install sentencepiece"
fi
# The observability tests read the head's /metrics with Prometheus' own Python parser too, and
# the TensorBoard files troupe writes with the tensorboard package's reader.
if ! "$py" -c 'import prometheus_client' >/dev/null 2>&1; then
  pip_install prometheus_client || skip_part "cannot install prometheus_client"
fi
if ! "$py" -c 'import tensorboard' >/dev/null 2>&1; then
  pip_install tensorboard || skip_part "cannot install tensorboard"
fi
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  pip_install torch --index-url https://download.pytorch.org/whl/cpu || pip_install torch ||
    give_up "cannot install torch"
fi
if ! "$py" -c 'import transformers, safetensors' >/dev/null 2>&1; then
  pip_install transformers safetensors || give_up "cannot install transformers"
fi
say "ready: $venv: $("$py" -c '
import torch, transformers
line = ["torch", torch.__version__, "transformers", transformers.__version__]
for name in ("tiktoken", "sentencepiece"):
    try:
        line += [name, __import__(name).__version__]
    except ImportError:
        line += [name, "missing"]
print(*line)' 2>/dev/null)"
