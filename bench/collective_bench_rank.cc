// The measurement one rank runs, whatever the library; see collective_bench.h.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/collective_bench.h"

namespace troupe::bench::collective {
namespace {

constexpr size_t kBytesPerIterationSet = size_t{256} << 20;

float contribution(int rank, size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 7 + 1));
}

absl::Status wrong(const char* op, size_t bytes, int n, size_t i, float got, float expected) {
  return absl::DataLossError(absl::StrCat(op, " of ", bytes, " B on ", n, " ranks: element ", i,
                                          " is ", got, ", expected ", expected));
}

// One allreduce of the closed-form pattern, checked on this rank.
absl::Status checked_allreduce(RankComm& comm, std::vector<float>& data) {
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = contribution(comm.rank(), i);
  if (absl::Status s = comm.allreduce_sum(data.data(), data.size()); !s.ok()) return s;
  const int n = comm.size();
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < data.size(); ++i) {
    float expected = static_cast<float>(i % 7 + 1) * ranks_sum;
    if (data[i] != expected) {
      return wrong("allreduce", data.size() * sizeof(float), n, i, data[i], expected);
    }
  }
  return absl::OkStatus();
}

// One reduce-scatter of the closed-form pattern over `input` (n blocks of
// `output`'s size), checked on this rank's block.
absl::Status checked_reduce_scatter(RankComm& comm, std::vector<float>& input,
                                    std::vector<float>& output) {
  for (size_t i = 0; i < input.size(); ++i)
    input[i] = contribution(comm.rank(), i);
  absl::Status s = comm.reduce_scatter_sum(input.data(), output.data(), output.size());
  if (!s.ok()) return s;
  const int n = comm.size();
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (size_t j = 0; j < output.size(); ++j) {
    size_t i = static_cast<size_t>(comm.rank()) * output.size() + j;
    float expected = static_cast<float>(i % 7 + 1) * ranks_sum;
    if (output[j] != expected) {
      return wrong("reduce_scatter", input.size() * sizeof(float), n, i, output[j], expected);
    }
  }
  return absl::OkStatus();
}

// One allgather of each rank's pattern, checked for every rank's block.
absl::Status checked_allgather(RankComm& comm, std::vector<float>& input,
                               std::vector<float>& output) {
  for (size_t j = 0; j < input.size(); ++j)
    input[j] = contribution(comm.rank(), j);
  if (absl::Status s = comm.allgather(input.data(), output.data(), input.size()); !s.ok()) return s;
  for (size_t i = 0; i < output.size(); ++i) {
    float expected = contribution(static_cast<int>(i / input.size()), i % input.size());
    if (output[i] != expected) {
      return wrong("allgather", output.size() * sizeof(float), comm.size(), i, output[i], expected);
    }
  }
  return absl::OkStatus();
}

// Seconds per `op` of `bytes` after `warmup` untimed ones and a check.
absl::StatusOr<double> measure(RankComm& comm, Op op, size_t bytes, long warmup, long iterations) {
  const size_t whole = bytes / sizeof(float);
  const size_t block = whole / static_cast<size_t>(comm.size());
  if (op != Op::kAllreduce && (block == 0 || block * static_cast<size_t>(comm.size()) != whole)) {
    return absl::InvalidArgumentError(absl::StrCat(name_of(op), " of ", bytes, " B on ",
                                                   comm.size(), " ranks: not a multiple of ",
                                                   4 * comm.size(), " B"));
  }
  std::vector<float> data(whole, 0.0f);
  std::vector<float> part(op == Op::kAllreduce ? 0 : block, 0.0f);
  auto once = [&]() -> absl::Status {
    switch (op) {
      case Op::kAllreduce:
        return comm.allreduce_sum(data.data(), data.size());
      case Op::kReduceScatter:
        return comm.reduce_scatter_sum(data.data(), part.data(), part.size());
      case Op::kAllgather:
        return comm.allgather(part.data(), data.data(), part.size());
    }
    return absl::InternalError("unknown op");
  };
  for (long i = 0; i < warmup; ++i) {
    if (absl::Status s = once(); !s.ok()) return s;
  }
  absl::Status checked = op == Op::kAllreduce       ? checked_allreduce(comm, data)
                         : op == Op::kReduceScatter ? checked_reduce_scatter(comm, data, part)
                                                    : checked_allgather(comm, part, data);
  if (!checked.ok()) return checked;
  std::fill(data.begin(), data.end(), 0.0f);
  std::fill(part.begin(), part.end(), 0.0f);
  if (absl::Status s = comm.barrier(); !s.ok()) return s;
  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
    if (absl::Status s = once(); !s.ok()) return s;
  }
  return seconds_since(start) / static_cast<double>(iterations);
}

}  // namespace

long timed_iterations(const Plan& plan, size_t bytes) {
  if (plan.iterations > 0) return plan.iterations;
  return std::clamp(static_cast<long>(kBytesPerIterationSet / std::max<size_t>(bytes, 1)), 5L,
                    1000L);
}

long warmup_iterations(const Plan& plan, size_t bytes) {
  if (plan.warmup >= 0) return plan.warmup;
  return std::clamp(timed_iterations(plan, bytes) / 10, 2L, 20L);
}

long latency_iterations(const Plan& plan) {
  if (plan.latency_iterations > 0) return plan.latency_iterations;
  return plan.iterations > 0 ? plan.iterations : 2000;
}

const char* name_of(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllgather:
      return "allgather";
  }
  return "?";
}

absl::StatusOr<Op> parse_op(const std::string& name) {
  for (Op op : {Op::kAllreduce, Op::kReduceScatter, Op::kAllgather}) {
    if (name == name_of(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--op '", name, "': the operations are allreduce, reduce_scatter and allgather"));
}

double bus_factor(Op op, int ranks) {
  double f = static_cast<double>(ranks - 1) / static_cast<double>(ranks);
  return op == Op::kAllreduce ? 2 * f : f;
}

std::vector<std::string> plan_flags(const Plan& plan) {
  return {"--op",
          name_of(plan.op),
          "--sizes",
          absl::StrJoin(plan.sizes, ","),
          "--iters",
          std::to_string(plan.iterations),
          "--warmup",
          std::to_string(plan.warmup),
          "--latency-iters",
          std::to_string(plan.latency_iterations)};
}

absl::StatusOr<std::vector<size_t>> parse_sizes(const std::string& list) {
  std::vector<size_t> sizes;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    uint64_t scale = 1;
    if (absl::ConsumeSuffix(&item, "K")) scale = 1024;
    if (absl::ConsumeSuffix(&item, "M")) scale = 1024 * 1024;
    uint64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value == 0 || (value * scale) % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("size '", std::string(item), "' is not a positive multiple of 4 bytes"));
    }
    sizes.push_back(static_cast<size_t>(value * scale));
  }
  if (sizes.empty()) return absl::InvalidArgumentError("no sizes given");
  return sizes;
}

absl::StatusOr<Plan> plan_from(const Flags& flags) {
  Plan plan;
  absl::StatusOr<Op> op = parse_op(flags.get("--op", "allreduce"));
  if (!op.ok()) return op.status();
  plan.op = *op;
  absl::StatusOr<std::vector<size_t>> sizes =
      parse_sizes(flags.get("--sizes", "1K,4K,16K,64K,256K,1M,4M,16M,64M"));
  if (!sizes.ok()) return sizes.status();
  plan.sizes = *std::move(sizes);
  plan.iterations = flags.get_long("--iters", 0);
  plan.warmup = flags.get_long("--warmup", -1);
  plan.latency_iterations = flags.get_long("--latency-iters", 0);
  if (plan.iterations < 0 || plan.latency_iterations < 0) {
    return absl::InvalidArgumentError("--iters and --latency-iters must not be negative");
  }
  return plan;
}

absl::Status run_rank(RankComm& comm, const Plan& plan, const std::string& path) {
  RankFigures figures;
  for (size_t bytes : plan.sizes) {
    absl::StatusOr<double> s = measure(comm, plan.op, bytes, warmup_iterations(plan, bytes),
                                       timed_iterations(plan, bytes));
    if (!s.ok()) return s.status();
    figures.seconds[bytes] = *s;
  }
  long n = latency_iterations(plan);
  absl::StatusOr<double> latency =
      measure(comm, Op::kAllreduce, kLatencyBytes, std::clamp(n / 10, 2L, 100L), n);
  if (!latency.ok()) return latency.status();
  figures.latency = *latency;

  std::ofstream out(path);
  out.precision(9);
  for (const auto& [bytes, seconds] : figures.seconds)
    out << "size " << bytes << " " << seconds << "\n";
  out << "latency " << figures.latency << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write figures to ", path));
  return absl::OkStatus();
}

std::string figures_path(const std::string& run_dir, int rank) {
  return absl::StrCat(run_dir, "/rank-", rank);
}

absl::StatusOr<RankFigures> read_figures(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no figures at ", path));
  RankFigures figures;
  std::string what;
  while (in >> what) {
    size_t bytes = 0;
    double seconds = 0;
    if (what == "size" && in >> bytes >> seconds) {
      figures.seconds[bytes] = seconds;
    } else if (what == "latency" && in >> seconds) {
      figures.latency = seconds;
    } else {
      return absl::DataLossError(absl::StrCat("unreadable figures in ", path));
    }
  }
  if (figures.seconds.empty() || figures.latency <= 0) {
    return absl::DataLossError(absl::StrCat("incomplete figures in ", path));
  }
  return figures;
}

int rank_exit_code(const std::string& who, const absl::Status& status) {
  if (status.ok()) return 0;
  std::fprintf(stderr, "collective_bench: %s: %s\n", who.c_str(), status.ToString().c_str());
  return status.code() == absl::StatusCode::kDataLoss ? kExitWrongResult : kExitFailed;
}

}  // namespace troupe::bench::collective
