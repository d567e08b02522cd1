// GEMM benchmark: nn::gemm (OpenBLAS sgemm) in GFLOP/s on square matrices
// and on the shapes of a GPT-2 small layer, at 1 thread and at every core,
// next to the machine's fp32 peak in the same invocation.
//
//   gemm_bench [--square 512,1024,2048] [--bt 2048] [--channels 768]
//              [--threads 1,N] [--repeat 5] [--min-seconds 0.2]
//              [--ghz G] [--flops-per-cycle F] [--json FILE]
//
// GPT cases (llm.c's matmuls, BT = B*T tokens, C channels): the forward
// qkv (N = 3C), attention projection (N = C), MLP up (N = 4C) and down
// (K = 4C) products, inp W^T; and the MLP up layer's backward, dinp = dout W
// and dweight = dout^T inp.
//
// Peak = cores x GHz x FLOPs per cycle per core. Cores are the physical
// cores this process may run on (SMT siblings share the FMA units), GHz is
// /proc/cpuinfo's "cpu MHz" (the nominal clock on most VMs; turbo can beat
// it), and FLOPs per cycle is 2 (multiply and add) x the fp32 lanes of the
// widest FMA (16 for AVX-512, 8 for AVX2) x 2 FMA units - the server-core
// figure; pass --flops-per-cycle for a part with one unit. GFLOP/s counts
// 2 M N K per call. Each figure is the median of --repeat samples of at
// least --min-seconds; every case is checked against a double-precision dot
// product first, and a wrong result fails the run.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "nn/gemm.h"
#include "nn/threads.h"

using troupe::bench::Row;

namespace {

struct Case {
  std::string name;
  bool trans_a, trans_b;
  int M, N, K;
};

struct Peak {
  int cores = 1;
  double ghz = 0;
  double flops_per_cycle = 0;
  std::string isa;
  double gflops(int threads) const { return std::min(threads, cores) * ghz * flops_per_cycle; }
};

std::vector<long> parse_list(const std::string& text) {
  std::vector<long> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) values.push_back(std::strtol(item.c_str(), nullptr, 10));
  }
  return values;
}

// Cores, clock and vector width from /proc/cpuinfo and the affinity mask.
Peak estimate_peak() {
  Peak peak;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int logical = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  std::ifstream cpuinfo("/proc/cpuinfo");
  int siblings = 0, cores_per_package = 0;
  std::string flags;
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = line.substr(colon + 1);
    if (key == "cpu MHz") peak.ghz = std::max(peak.ghz, std::strtod(value.c_str(), nullptr) / 1e3);
    if (key == "siblings") siblings = std::atoi(value.c_str());
    if (key == "cpu cores") cores_per_package = std::atoi(value.c_str());
    if (key == "flags" && flags.empty()) flags = value + " ";
  }
  const int smt =
      siblings > 0 && cores_per_package > 0 ? std::max(1, siblings / cores_per_package) : 1;
  peak.cores = std::max(1, logical / smt);
  const bool fma = flags.find(" fma ") != std::string::npos;
  if (flags.find(" avx512f ") != std::string::npos) {
    peak.isa = "AVX-512";
    peak.flops_per_cycle = 2 * 16 * 2;
  } else if (fma && flags.find(" avx2 ") != std::string::npos) {
    peak.isa = "AVX2+FMA";
    peak.flops_per_cycle = 2 * 8 * 2;
  } else {
    peak.isa = "SSE";
    peak.flops_per_cycle = 2 * 4 * 2;
  }
  return peak;
}

std::vector<float> random_matrix(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> m(count);
  for (float& x : m)
    x = value(rng);
  return m;
}

struct Operands {
  std::vector<float> A, B, C;
  int lda, ldb, ldc;
};

Operands make_operands(const Case& c) {
  Operands o;
  o.A = random_matrix(static_cast<size_t>(c.M) * c.K, 1);
  o.B = random_matrix(static_cast<size_t>(c.K) * c.N, 2);
  o.C.assign(static_cast<size_t>(c.M) * c.N, 0.0f);
  o.lda = c.trans_a ? c.M : c.K;
  o.ldb = c.trans_b ? c.K : c.N;
  o.ldc = c.N;
  return o;
}

void run(const Case& c, Operands& o) {
  troupe::nn::gemm(c.trans_a, c.trans_b, c.M, c.N, c.K, 1.0f, o.A.data(), o.lda, o.B.data(), o.ldb,
                   0.0f, o.C.data(), o.ldc);
}

// Compares 64 sampled entries of C with a double-precision dot product.
bool check(const Case& c, Operands& o) {
  run(c, o);
  std::mt19937 rng(3);
  for (int s = 0; s < 64; ++s) {
    const int i = static_cast<int>(rng() % c.M), j = static_cast<int>(rng() % c.N);
    double expected = 0, magnitude = 0;
    for (int k = 0; k < c.K; ++k) {
      const double a = c.trans_a ? o.A[static_cast<size_t>(k) * o.lda + i]
                                 : o.A[static_cast<size_t>(i) * o.lda + k];
      const double b = c.trans_b ? o.B[static_cast<size_t>(j) * o.ldb + k]
                                 : o.B[static_cast<size_t>(k) * o.ldb + j];
      expected += a * b;
      magnitude += std::abs(a * b);
    }
    const double got = o.C[static_cast<size_t>(i) * o.ldc + j];
    if (std::abs(got - expected) > 1e-5 * (c.K + 4) * magnitude + 1e-6) {
      std::fprintf(stderr, "gemm_bench: %s: C[%d, %d] = %g, expected %g\n", c.name.c_str(), i, j,
                   got, expected);
      return false;
    }
  }
  return true;
}

double gflops(const Case& c, Operands& o, int repeat, double min_seconds) {
  const double flops = 2.0 * c.M * c.N * c.K;
  run(c, o);  // warm-up
  std::vector<double> samples;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    long calls = 0;
    double elapsed = 0;
    do {
      run(c, o);
      ++calls;
      elapsed = troupe::bench::seconds_since(start);
    } while (elapsed < min_seconds);
    samples.push_back(flops * static_cast<double>(calls) / elapsed / 1e9);
  }
  return troupe::bench::median(samples);
}

}  // namespace

int main(int argc, char** argv) {
  troupe::bench::Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: gemm_bench [--square N,N,...] [--bt BT] [--channels C] [--threads T,T,...] "
        "[--repeat N] [--min-seconds S] [--ghz G] [--flops-per-cycle F] [--json FILE]\n");
    return 0;
  }
  Peak peak = estimate_peak();
  const int all_cores = troupe::nn::num_threads();
  const std::vector<long> square = parse_list(flags.get("--square", "512,1024,2048"));
  const int bt = static_cast<int>(flags.get_long("--bt", 2048));
  const int channels = static_cast<int>(flags.get_long("--channels", 768));
  const std::vector<long> threads =
      parse_list(flags.get("--threads", "1," + std::to_string(all_cores)));
  const int repeat = static_cast<int>(flags.get_long("--repeat", 5));
  const double min_seconds = std::strtod(flags.get("--min-seconds", "0.2").c_str(), nullptr);
  const std::string json = flags.get("--json", "");
  if (flags.has("--ghz")) peak.ghz = std::strtod(flags.get("--ghz", "").c_str(), nullptr);
  if (flags.has("--flops-per-cycle")) {
    peak.flops_per_cycle = std::strtod(flags.get("--flops-per-cycle", "").c_str(), nullptr);
  }
  if (repeat < 1 || bt < 1 || channels < 1 || threads.empty() || peak.ghz <= 0) {
    std::fprintf(stderr,
                 "gemm_bench: --repeat, --bt, --channels must be at least 1, --threads non-empty, "
                 "and the clock known (pass --ghz)\n");
    return 1;
  }
  std::printf(
      "gemm_bench: peak %.1f GFLOP/s per core = %.2f GHz x %.0f FLOP/cycle (%s, 2 FMA "
      "units); %d physical core(s)\n",
      peak.ghz * peak.flops_per_cycle, peak.ghz, peak.flops_per_cycle, peak.isa.c_str(),
      peak.cores);
  std::printf("gemm_bench: BLAS %s\n", troupe::nn::gemm_backend().c_str());
  if (const std::string warning = troupe::nn::gemm_backend_warning(); !warning.empty()) {
    std::printf("gemm_bench: WARNING: %s\n", warning.c_str());
  }

  std::vector<Case> cases;
  for (long n : square) {
    const int s = static_cast<int>(n);
    cases.push_back({"square " + std::to_string(s), false, false, s, s, s});
  }
  const int C = channels;
  const std::string shape = " BT=" + std::to_string(bt) + " C=" + std::to_string(C);
  cases.push_back({"fwd qkv" + shape, false, true, bt, 3 * C, C});
  cases.push_back({"fwd attproj" + shape, false, true, bt, C, C});
  cases.push_back({"fwd fc" + shape, false, true, bt, 4 * C, C});
  cases.push_back({"fwd fcproj" + shape, false, true, bt, C, 4 * C});
  cases.push_back({"bwd fc dinp" + shape, false, false, bt, C, 4 * C});
  cases.push_back({"bwd fc dweight" + shape, true, false, 4 * C, C, bt});

  std::vector<Row> rows;
  for (const Case& c : cases) {
    Operands o = make_operands(c);
    if (!check(c, o)) return 1;
    for (long t : threads) {
      troupe::nn::set_num_threads(static_cast<int>(t));
      const double g = gflops(c, o, repeat, min_seconds);
      rows.push_back(
          {c.name + " " + std::to_string(t) + "t", "GFLOP/s", g, peak.gflops(static_cast<int>(t))});
    }
  }
  troupe::bench::print_table("peak", rows);
  if (!json.empty() && !troupe::bench::write_json(json, "gemm_bench", "peak", rows)) {
    std::fprintf(stderr, "gemm_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
