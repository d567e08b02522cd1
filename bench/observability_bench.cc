// What watching a run costs it (docs/observability.md): the README's DDP job (examples/configs/
// addition_ddp.json, two local workers) with the head's metrics, a --trace file and TensorBoard
// scalars all on, against all off (training.report_metrics false, no trace, no TensorBoard), in
// alternating rounds. A step's cost is the driver's wall time per step between the 10th and the
// last step (the metrics lines' "time"), so that the reporting done between steps counts. Prints
// the median of each and the ratio; the goal is at most 1.02. Runs this short are noisy on a
// shared machine (a round's ratio swings by 10%), so the bench also times the watching itself in
// this process - a step's report built and encoded as the tell to the head encodes it, its trace
// events and its TensorBoard scalars written - and gives it as a share of the measured step.
//
//   observability_bench [--steps N] [--rounds R] [--tiny]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "core/cluster/detail/metrics_store.h"
#include "core/codec.h"
#include "nlohmann/json.hpp"
#include "trainers/job_metrics.h"
#include "trainers/tensorboard.h"
#include "trainers/trace.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Seconds a step from the metrics lines' times, over steps (skip, last]; 0 if too few.
double seconds_per_step(const std::string& metrics, int skip) {
  std::vector<double> times;
  std::istringstream lines(metrics);
  std::string line;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("time") || !j.contains("step_ms")) continue;
    times.push_back(j["time"].get<double>());
  }
  if (static_cast<int>(times.size()) <= skip + 1) return 0;
  return (times.back() - times[static_cast<size_t>(skip)]) /
         static_cast<double>(times.size() - 1 - static_cast<size_t>(skip));
}

// One run, watched or not; seconds a step, or 0 on failure (said).
double run(const std::string& dir, bool watched, int steps) {
  std::string config = read_file(TROUPE_EXAMPLE_CONFIGS "/addition_ddp.json");
  const std::string extra =
      watched ? R"("training": {"report_metrics": true, "tensorboard_dir": "tb", )"
              : R"("training": {"report_metrics": false, )";
  const size_t at = config.find("\"training\": {");
  if (at == std::string::npos) return 0;
  config.replace(at, std::string("\"training\": {").size(), extra);
  std::ofstream(dir + "/config.json") << config;
  std::filesystem::remove_all(dir + "/out");
  const std::string command =
      absl::StrCat("cd '", dir, "' && timeout -s KILL 600 '", TROUPE_BINARY,
                   "' train --config config.json --local 2 --output out --metrics m.jsonl --steps ",
                   steps, watched ? " --trace trace.json" : "", " >run.log 2>&1");
  if (std::system(command.c_str()) != 0) {
    std::printf("observability_bench: a run failed:\n%s\n", read_file(dir + "/run.log").c_str());
    return 0;
  }
  return seconds_per_step(read_file(dir + "/m.jsonl"), 10);
}

// Microseconds the watching costs a step of the DDP job (two ranks), in this process: the
// reporter's report encoded for the head, the trace's events, the TensorBoard scalars; the median
// over `steps` steps, files in `dir`.
// *head_us: the head's part, each report decoded from its encoding and added to a job's
// MetricsStore.
double watching_us(const std::string& dir, int steps, double* head_us) {
  using namespace troupe;
  using namespace troupe::trainers;
  absl::StatusOr<TraceWriter> trace = TraceWriter::open(dir + "/micro.json", {});
  absl::StatusOr<TensorBoardWriter> tb = TensorBoardWriter::open(dir + "/micro_tb");
  if (!trace.ok() || !tb.ok()) return 0;
  size_t encoded = 0;
  std::vector<std::string> sent;  // each report's encoding, for the head's part
  JobMetricsReporter reporter(
      [&](cluster::MetricsReport r) {
        Writer w;
        w.write(r);
        encoded += w.bytes().size();
        sent.emplace_back(reinterpret_cast<const char*>(w.bytes().data()), w.bytes().size());
        if (!tb->report(r).ok()) encoded = 0;
      },
      FlopsModel{.flops_per_token = 1e6, .peak_per_rank = 1e11}, /*rank_every=*/20);
  StepOutcome s;
  s.applied = true;
  s.loss = 1.5;
  s.lr = 1e-3f;
  s.dp = 2;
  s.tokens = 960;
  s.step_ms = 6;
  for (int d = 0; d < 2; ++d) {
    RankUsage r;
    r.at = {.d = d};
    r.memory.parameters = 474000;
    r.sent.allreduce = 474000;
    r.forward_ms = 1.5;
    r.backward_ms = 3;
    s.ranks.push_back(r);
  }
  std::vector<double> us;
  for (int k = 1; k <= steps; ++k) {
    s.step = k;
    const auto start = std::chrono::steady_clock::now();
    const double t = trace->now_us();
    reporter.on_step(s);
    trace->step(s, t, t + 6000);
    us.push_back(1e6 * troupe::bench::seconds_since(start));
  }
  std::vector<double> head;
  cluster::MetricsStore store;
  for (const std::string& bytes : sent) {
    const auto start = std::chrono::steady_clock::now();
    Reader r(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
    cluster::MetricsReport report;
    if (!r.read(report)) return 0;
    store.add(std::move(report));
    head.push_back(1e6 * troupe::bench::seconds_since(start));
  }
  *head_us = troupe::bench::median(head);
  return encoded > 0 ? troupe::bench::median(us) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 400, rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tiny") {
      steps = 30;
      rounds = 1;
    } else if (a == "--steps" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &steps) || steps < 20) return 2;
    } else if (a == "--rounds" && i + 1 < argc) {
      if (!absl::SimpleAtoi(argv[++i], &rounds) || rounds < 1) return 2;
    } else {
      std::fprintf(stderr, "usage: observability_bench [--steps N] [--rounds R] [--tiny]\n");
      return 2;
    }
  }
  char path[] = "/tmp/troupe-observability-bench-XXXXXX";
  if (mkdtemp(path) == nullptr) return 1;
  const std::string dir = path;
  std::printf("observability_bench: addition_ddp.json, %d steps, %d rounds; %d cores, load %.2f\n",
              steps, rounds, troupe::bench::cores_available(), troupe::bench::load_average());
  std::vector<double> off, on;
  for (int r = 0; r < rounds; ++r) {
    // Alternating, and in turn first, so that a change of the machine's load falls on both.
    double a = 0, b = 0;
    if (r % 2 == 0) {
      a = run(dir, false, steps);
      b = run(dir, true, steps);
    } else {
      b = run(dir, true, steps);
      a = run(dir, false, steps);
    }
    if (a <= 0 || b <= 0) {
      std::filesystem::remove_all(dir);
      return 1;
    }
    off.push_back(a);
    on.push_back(b);
    std::printf("  round %d: off %.3f ms a step, on %.3f ms (%.3fx)\n", r + 1, 1000 * a, 1000 * b,
                b / a);
  }
  double head_us = 0;
  const double micro_us = watching_us(dir, 20 * steps, &head_us);
  std::filesystem::remove_all(dir);
  const double m_off = troupe::bench::median(off), m_on = troupe::bench::median(on);
  std::vector<double> ratios;
  for (size_t i = 0; i < on.size(); ++i)
    ratios.push_back(on[i] / off[i]);
  std::printf("%-44s %12s %12s %8s\n", "case", "watched", "unwatched", "ratio");
  std::printf("%-44s %12.3f %12.3f %7.3fx   (ms a step, median; goal <= 1.02x)\n",
              "metrics + trace + TensorBoard, DDP small", 1000 * m_on, 1000 * m_off, m_on / m_off);
  std::printf("  the rounds' own ratios: median %.3fx\n", troupe::bench::median(ratios));
  std::printf(
      "  the watching itself, timed in this process: %.1f us a step = %.2f%% of a %.2f ms "
      "step (goal <= 2%%)\n",
      micro_us, 100 * micro_us / (1e6 * m_off), 1000 * m_off);
  std::printf(
      "  on the head, a report decoded and kept: %.1f us a step = %.2f%% of one of its two "
      "cores' step\n",
      head_us, 100 * head_us / (1e6 * m_off));
  return 0;
}
