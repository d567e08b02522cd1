// The fixture of the multi-process cluster tests: a LocalCluster (a head and
// worker processes of the troupe executable, loading the probe actor
// library) and a driver connected to it, made afresh for every test.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"

namespace troupe::cluster::testing {

// Workers with these --resources, loading the probe library.
inline LocalClusterOptions probe_cluster(std::vector<std::string> resources) {
  LocalClusterOptions o;
  o.workers = static_cast<int>(resources.size());
  o.worker_resources = std::move(resources);
  o.troupe_binary = TROUPE_BINARY;
  o.worker_flags = {"--actor-lib-dir", PROBE_LIB_DIR, "--actor-lib", PROBE_LIB};
  return o;
}

// A tiny `troupe train` job with fault tolerance, for the tests that lose a
// worker under it: `dp` ranks (one CPU each), `steps` steps, its metrics in
// DIR/out/metrics.jsonl. Returns the config's path.
inline std::string fault_tolerant_job(const std::string& dir, int dp, int steps) {
  const std::string config = dir + "/job.json";
  std::ofstream(config) << R"({
    "train_batch_size": )"
                        << 2 * dp << R"(, "train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "model": {"n_layer": 2, "n_head": 2, "n_embd": 32, "seq_len": 16, "vocab_size": 256},
    "data": {"synthetic": {"task": "addition", "digits": 2, "num_samples": 100000, "seed": 1}},
    "parallel": {"dp": )"
                        << dp << R"(},
    "fault_tolerance": {"enabled": true, "spare_nodes": 0, "wait_for_node_s": 3},
    "steps_per_print": 1000,
    "training": {"steps": )"
                        << steps << R"(, "eval_interval": 0, "output_dir": ")" << dir << R"(/out"}
  })";
  return config;
}

class LocalClusterTest : public ::testing::Test {
 public:
  explicit LocalClusterTest(LocalClusterOptions options) : options_(std::move(options)) {}

  void SetUp() override {
    auto local = LocalCluster::start(options_);
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = *std::move(local);
    auto driver = Cluster::connect(local_->client_options());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
  }
  void TearDown() override {
    driver_.reset();
    local_.reset();
  }

  // Polls the head until `pred(status)` holds or the deadline passes.
  bool wait_status(const std::function<bool(const ClusterStatus&)>& pred,
                   absl::Duration timeout = absl::Seconds(10)) {
    absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      auto s = driver_->status();
      if (s.ok() && pred(*s)) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

 protected:
  const LocalClusterOptions options_;
  std::unique_ptr<LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
};

}  // namespace troupe::cluster::testing
