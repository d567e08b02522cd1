// zero_bench's sides: troupe's trainer on a LocalCluster, and the Python peers; see zero_bench.h.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_fail.h"
#include "bench/bench_util.h"
#include "bench/zero_bench.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

#ifndef TROUPE_BINARY
#define TROUPE_BINARY "troupe"
#endif
#ifndef TROUPE_ZERO_BENCH_PEER_SCRIPT
#define TROUPE_ZERO_BENCH_PEER_SCRIPT "bench/zero_bench_peer.py"
#endif

namespace troupe::bench::zero {
namespace {

constexpr int kPeerTimeoutS = 1800;  // one peer run, start to end (DeepSpeed may build its Adam)

}  // namespace

Run run_troupe(const std::string& path, int stage, int ranks, int threads, int steps, int warmup) {
  cluster::LocalClusterOptions options;
  options.workers = ranks;
  options.default_resources = "CPU=2";
  options.troupe_binary = TROUPE_BINARY;
  options.echo_output = false;
  // With the OpenMP build of OpenBLAS, GEMMs take their threads from the calling thread's
  // OpenMP setting: the workers start with it (ddp_bench does the same).
  const char* was = std::getenv("OMP_NUM_THREADS");
  const std::string saved = was != nullptr ? was : "";
  ::setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  std::unique_ptr<cluster::LocalCluster> local =
      value_or_die(cluster::LocalCluster::start(options), "starting the local cluster");
  if (was != nullptr) {
    ::setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  } else {
    ::unsetenv("OMP_NUM_THREADS");
  }
  std::unique_ptr<Cluster> driver =
      value_or_die(Cluster::connect(local->client_options()), "connecting the driver");

  trainers::TrainConfig c = value_or_die(trainers::load_train_config(path), "reading " + path);
  c.zero.stage = stage;
  c.parallel.dp = ranks;
  const std::string what = "troupe zero-" + std::to_string(stage);
  auto trainer =
      value_or_die(trainers::DataParallelTrainer::start(*driver, c, "zero-bench", threads),
                   what + ": starting the trainer");
  std::vector<double> step_ms, sent;
  Run r;
  for (int k = 1; k <= warmup + steps; ++k) {
    trainers::StepOutcome o = value_or_die(trainer->step(k), what + ": step " + std::to_string(k));
    if (!o.applied || !std::isfinite(o.loss)) die(what + ": step " + std::to_string(k) + " failed");
    if (k == 1) r.loss_first = o.loss;
    r.loss_last = o.loss;
    r.peak_rss = std::max(r.peak_rss, static_cast<double>(o.memory.peak_rss));
    r.model_state = static_cast<double>(o.memory.model_state());
    if (k <= warmup) continue;
    step_ms.push_back(o.step_ms);
    sent.push_back(static_cast<double>(o.sent.total()));
  }
  if (absl::Status s = trainer->stop(); !s.ok()) die(what + ": stop: " + s.ToString());
  trainer.reset();
  driver.reset();  // before the cluster it is connected to
  local.reset();
  r.ok = true;
  r.step_ms = median(step_ms);
  r.samples_per_s = static_cast<double>(c.train_batch_size) / (r.step_ms / 1e3);
  r.sent_bytes = median(sent);
  return r;
}

Run run_peer(const std::string& python, const std::string& framework, const std::string& path,
             int stage, int ranks, int threads, int steps, int warmup) {
  Run r;
  std::string cmd = "DS_ACCELERATOR=cpu timeout -k 10 " + std::to_string(kPeerTimeoutS + 60) + " " +
                    shell_quote(python) + " " + shell_quote(TROUPE_ZERO_BENCH_PEER_SCRIPT) +
                    " --framework " + framework + " --config " + shell_quote(path) + " --ranks " +
                    std::to_string(ranks) + " --threads " + std::to_string(threads) + " --steps " +
                    std::to_string(steps) + " --warmup " + std::to_string(warmup) + " --timeout " +
                    std::to_string(kPeerTimeoutS) + " --parent-pid " + std::to_string(::getpid());
  if (framework == "deepspeed") cmd += " --stage " + std::to_string(stage);
  cmd += " 2>&1";
  std::fflush(stdout);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    r.why = "peer failed: cannot start " + python;
    return r;
  }
  const std::string out = read_all(pipe);
  const int status = ::pclose(pipe);
  const std::string marker = "ZERO_PEER_RESULT ";
  const size_t at = out.rfind(marker);
  if (at == std::string::npos) {
    // The peer's last line says why (a missing module, a timeout).
    std::string tail = out.substr(out.size() > 600 ? out.size() - 600 : 0);
    r.why =
        (WIFEXITED(status) && WEXITSTATUS(status) == 3 ? "peer skipped: " : "peer failed: ") + tail;
    return r;
  }
  const std::string line = out.substr(at + marker.size(), out.find('\n', at) - at - marker.size());
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    r.samples_per_s = j.at("samples_per_s").get<double>();
    r.step_ms = j.at("step_ms_median").get<double>();
    r.peak_rss = j.at("peak_rss_bytes_max").get<double>();
    // What a ring would send of the collectives the peer called (it cannot see gloo's own
    // sends): comparable with troupe's bytes sent.
    if (j.contains("comm_detail") &&
        j["comm_detail"].value("ring_send_bytes_per_step_estimate", nlohmann::json()).is_number()) {
      r.sent_bytes = j["comm_detail"]["ring_send_bytes_per_step_estimate"].get<double>();
    }
    const auto& losses = j.at("losses");
    if (!losses.empty()) {
      r.loss_first = losses.front().get<double>();
      r.loss_last = losses.back().get<double>();
    }
    r.note = j.value("optimizer", std::string());
    if (j.contains("versions")) r.note += " " + j["versions"].dump();
    r.ok = true;
  } catch (const nlohmann::json::exception& e) {
    r.why = std::string("peer failed: its result is not JSON (") + e.what() + ")";
  }
  return r;
}

}  // namespace troupe::bench::zero
