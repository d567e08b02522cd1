// Reduction kernel benchmark: reduce_into, reduce_many and scale over fp32,
// fp16 and bf16 buffers of each size, next to memcpy of the same size in the
// same invocation.
//
//   reduce_bench [--sizes 65536,4194304,67108864] [--repeat 5] [--sources 4]
//                [--sample-mib 256] [--json FILE]
//
// --sizes are the bytes of one buffer (dst, each src). GB/s counts the bytes
// of the buffers a call touches: dst + src for reduce_into and memcpy,
// dst + every src for reduce_many, and data twice for scale (it is both the
// source and the destination). Each figure is the median of --repeat samples;
// a sample repeats the call until it has touched --sample-mib MiB (at least
// one call), so that small sizes are timed over many calls, from cache. ratio =
// kernel / memcpy: 1 means the kernel moves its bytes as fast as memcpy does.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "transport/collectives/dtype.h"
#include "transport/collectives/reduce.h"

using namespace troupe::transport;
using troupe::bench::Row;

namespace {

// A buffer of `bytes`, 64-byte aligned, every page touched before timing.
struct Free {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t[], Free>;

Buffer make_buffer(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  Buffer b(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  if (!b) {
    std::fprintf(stderr, "reduce_bench: cannot allocate %zu bytes\n", bytes);
    std::exit(1);
  }
  std::memset(b.get(), 0, rounded);
  return b;
}

// Fills `count` elements of `type` with values uniform in [lo, hi).
void fill(DType type, void* data, size_t count, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(lo, hi);
  for (size_t i = 0; i < count; ++i) {
    const float v = value(rng);
    switch (type) {
      case DType::kFloat32:
        static_cast<float*>(data)[i] = v;
        break;
      case DType::kFloat16:
        static_cast<uint16_t*>(data)[i] = float_to_half(v);
        break;
      case DType::kBFloat16:
        static_cast<uint16_t*>(data)[i] = float_to_bf16(v);
        break;
    }
  }
}

// GB/s of `call`, which touches `bytes` each time: the median of `repeat`
// samples.
template <class Call>
double gbps(double bytes, int repeat, double sample_bytes, Call call) {
  const long calls = std::max(1L, static_cast<long>(sample_bytes / bytes));
  call();  // warm-up
  std::vector<double> samples;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i)
      call();
    samples.push_back(bytes * static_cast<double>(calls) / troupe::bench::seconds_since(start) /
                      1e9);
  }
  return troupe::bench::median(samples);
}

std::string size_name(size_t bytes) {
  if (bytes % (1024 * 1024) == 0) return std::to_string(bytes / (1024 * 1024)) + "MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes / 1024) + "KiB";
  return std::to_string(bytes) + "B";
}

}  // namespace

int main(int argc, char** argv) {
  troupe::bench::Flags flags(argc, argv);
  if (flags.has("--help")) {
    std::printf(
        "usage: reduce_bench [--sizes B,B,...] [--repeat N] [--sources N] [--sample-mib N] "
        "[--json FILE]\n");
    return 0;
  }
  std::vector<size_t> sizes;
  const std::string size_list = flags.get("--sizes", "65536,4194304,67108864");
  for (size_t begin = 0; begin <= size_list.size();) {
    size_t end = size_list.find(',', begin);
    if (end == std::string::npos) end = size_list.size();
    const std::string item = size_list.substr(begin, end - begin);
    char* rest = nullptr;
    const unsigned long long bytes = std::strtoull(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || bytes < 4 || bytes % 4 != 0) {
      std::fprintf(stderr, "reduce_bench: --sizes wants byte counts, multiples of 4 (got '%s')\n",
                   item.c_str());
      return 1;
    }
    sizes.push_back(static_cast<size_t>(bytes));
    begin = end + 1;
  }
  const int repeat = static_cast<int>(flags.get_long("--repeat", 5));
  const long nsources = flags.get_long("--sources", 4);
  const double sample_bytes =
      static_cast<double>(flags.get_long("--sample-mib", 256)) * 1024 * 1024;
  const std::string json = flags.get("--json", "");
  if (repeat < 1 || nsources < 1 || sample_bytes < 1) {
    std::fprintf(stderr, "reduce_bench: --repeat, --sources and --sample-mib must be at least 1\n");
    return 1;
  }
  std::printf("reduce_bench: %d repeats, reduce_many over %ld sources\n", repeat, nsources);

  std::vector<Row> rows;
  for (size_t bytes : sizes) {
    const double b = static_cast<double>(bytes);
    Buffer dst = make_buffer(bytes);
    std::vector<Buffer> srcs;
    std::vector<const void*> src_ptrs;
    for (long s = 0; s < nsources; ++s) {
      srcs.push_back(make_buffer(bytes));
      src_ptrs.push_back(srcs.back().get());
    }

    const double memcpy_gbps =
        gbps(2 * b, repeat, sample_bytes, [&] { std::memcpy(dst.get(), srcs[0].get(), bytes); });
    const std::string size = size_name(bytes);
    rows.push_back({"memcpy " + size, "GB/s", memcpy_gbps, memcpy_gbps});

    for (DType type : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
      const size_t count = bytes / element_size(type);
      // dst in [1, 2) and sources of at most 1e-4: sums stay finite and
      // normal however many calls a sample makes.
      fill(type, dst.get(), count, 1.0f, 2.0f, 1);
      for (long s = 0; s < nsources; ++s) {
        fill(type, srcs[s].get(), count, -1e-4f, 1e-4f, static_cast<uint32_t>(2 + s));
      }
      const std::string prefix = std::string(to_string(type)) + " ";
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        const double r = gbps(2 * b, repeat, sample_bytes,
                              [&] { reduce_into(type, op, dst.get(), srcs[0].get(), count); });
        rows.push_back({prefix + std::string(to_string(op)) + " " + size, "GB/s", r, memcpy_gbps});
      }
      const double many = gbps(b * static_cast<double>(1 + nsources), repeat, sample_bytes, [&] {
        reduce_many(type, ReduceOp::kSum, dst.get(), src_ptrs.data(), src_ptrs.size(), count);
      });
      rows.push_back(
          {prefix + "sum x" + std::to_string(nsources) + " " + size, "GB/s", many, memcpy_gbps});
      // -1 keeps the values exact and normal call after call.
      const double scaled =
          gbps(2 * b, repeat, sample_bytes, [&] { scale(type, dst.get(), count, -1.0f); });
      rows.push_back({prefix + "scale " + size, "GB/s", scaled, memcpy_gbps});
    }
  }
  troupe::bench::print_table("memcpy", rows);
  if (!json.empty() && !troupe::bench::write_json(json, "reduce_bench", "memcpy", rows)) {
    std::fprintf(stderr, "reduce_bench: cannot write %s\n", json.c_str());
    return 1;
  }
  return 0;
}
