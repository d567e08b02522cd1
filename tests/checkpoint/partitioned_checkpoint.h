// A checkpoint written as the owners and the driver of a ZeRO run over dp
// ranks write one, without a cluster: for the tests of the format and of the
// commands that read it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_file.h"

namespace troupe::checkpoint::testing {

// [begin, end) of rank r's part of n elements among dp (DeepSpeed's ceil split).
inline std::pair<int64_t, int64_t> partition(int64_t n, int dp, int r) {
  const int64_t part = (n + dp - 1) / dp;
  return {std::min(n, part * r), std::min(n, part * (r + 1))};
}

// Saves step `step` of `model` (AdamW) as dp owners, rank r its partition;
// element i of state k (0 param, 1 exp_avg, 2 exp_avg_sq) is value(k, i).
// Every file operation goes through `env`.
inline absl::Status save_partitioned(Env* env, const std::string& dir, int64_t step,
                                     const nn::GPTConfig& model, int dp,
                                     const std::function<float(int, int64_t)>& value,
                                     int keep = 2) {
  if (absl::Status s = begin_checkpoint(env, dir, step); !s.ok()) return s;
  Manifest m;
  m.step = step;
  m.applied_steps = step;
  m.model = model;
  m.layout = {.dp = dp, .pp = 1, .tp = 1, .zero_stage = dp > 1 ? 3 : 0};
  m.tensors = tensor_records(model);
  m.optimizer = {.type = "adamw", .updates = step};
  m.data = {.position = step * 8, .epoch = 0, .samples_per_epoch = 800};
  m.rng = {.seed = 1234, .task_seed = 1};
  m.config_hash = 42;
  m.config = R"({"train_batch_size":8})";
  const int64_t n = static_cast<int64_t>(nn::GPTParamLayout(model).num_params());
  const char* const states[] = {kParamState, kExpAvgState, kExpAvgSqState};
  for (int r = 0; r < dp; ++r) {
    auto [b, e] = partition(n, dp, r);
    std::vector<std::vector<float>> data(3);
    std::vector<StateArray> arrays;
    for (int k = 0; k < 3; ++k) {
      for (int64_t i = b; i < e; ++i)
        data[k].push_back(value(k, i));
      arrays.push_back({.state = states[k], .data = data[k].data(), .n = data[k].size()});
    }
    const Owner owner{.d = r, .p = 0, .t = 0};
    absl::StatusOr<std::vector<ShardEntry>> entries =
        write_shard_file(env, step_dir(dir, step), shard_file_name(owner), arrays);
    if (!entries.ok()) return entries.status();
    m.shards.push_back({.file = shard_file_name(owner),
                        .owner = owner,
                        .begin = b,
                        .end = e,
                        .entries = *entries});
  }
  return commit_checkpoint(env, dir, m, keep);
}

}  // namespace troupe::checkpoint::testing
