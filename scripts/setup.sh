#!/usr/bin/env bash
# Installs the Debian packages that troupe's build, tests and benchmarks need.
# Idempotent: installs only what is missing. Run as root on Debian 12.
set -euo pipefail

packages=(
  # toolchain (clang, its runtime for the libFuzzer targets and its OpenMP for those of nn code)
  build-essential cmake ninja-build ccache pkg-config git clang-format clang libclang-rt-14-dev
  libomp-dev
  # libraries the build links
  libabsl-dev libspdlog-dev libfmt-dev capnproto libcapnp-dev libasio-dev libssl-dev
  libibverbs-dev libucx-dev libopenblas-dev nlohmann-json3-dev libxxhash-dev
  # the tokenizers (text/): GPT-2's pre-tokenisation pattern, SentencePiece models
  libpcre2-dev libsentencepiece-dev
  # OpenBLAS's OpenMP build, which troupe_nn links when present (one thread pool with OpenMP's)
  libopenblas0-openmp
  # tests and benchmarks (peers: CAF for actors, ucx_perftest for transports)
  libgtest-dev libgmock-dev libbenchmark-dev libcaf-dev ucx-utils
  # peers for collective_bench: Gloo, and Open MPI with its mpirun
  libgloo-dev libopenmpi-dev openmpi-bin
  # the GPU check's bundle (scripts/bundle_gpu_check.sh): objdump, xz, python3
  binutils xz-utils python3
  # the dashboard's test loads the head's page in a headless browser (docs/observability.md)
  chromium fonts-dejavu-core
  # the launch test runs a real single-node Slurm (tests/cluster/slurm_test.sh)
  slurm-wlm munge openssl
  # the head's store on etcd: standby heads, tested against a real etcd (ctest -L failover)
  etcd-server
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root (or install them with sudo apt-get install)" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
