// A checkpoint written as the owners and the driver of a ZeRO run over dp
// ranks (and pp stages and tp slices) write one, without a cluster: for the tests of the format and
// of the commands that read it.
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
#include "nn/model/model.h"

namespace troupe::checkpoint::testing {

// [begin, end) of rank r's part of n elements among dp (DeepSpeed's ceil split).
inline std::pair<int64_t, int64_t> partition(int64_t n, int dp, int r) {
  const int64_t part = (n + dp - 1) / dp;
  return {std::min(n, part * r), std::min(n, part * (r + 1))};
}

// Saves step `step` of `model` (AdamW) as the owners of a mesh dp x pp x tp
// would: slice t's buffer cut into pp stages at block boundaries (as
// Megatron splits the blocks evenly), each stage's range into dp ZeRO
// partitions, owner (d, p, t) saving partition d. Element i of the whole
// model's state k (0 param, 1 exp_avg, 2 exp_avg_sq) is value(k, i), so a
// slice holds what tensor parallelism makes of it. Every file operation
// goes through `env`.
inline absl::Status save_sliced(io::Env* env, const std::string& dir, int64_t step,
                                const nn::ModelConfig& model, int dp, int pp, int tp,
                                const std::function<float(int, int64_t)>& value, int keep = 2) {
  if (absl::Status s = begin_checkpoint(env, dir, step); !s.ok()) return s;
  const nn::ModelLayout whole = nn::model_layout(model);
  std::vector<nn::ParamRange> stages;
  {
    const nn::ModelLayout slice = nn::model_layout(model, {.rank = 0, .size = tp});
    const int L = model.num_layers();
    for (int p = 0; p < pp; ++p) {
      stages.push_back({p == 0 ? 0 : slice.block_begin(L * p / pp),
                        p + 1 == pp ? slice.num_params() : slice.block_begin(L * (p + 1) / pp)});
    }
  }
  Manifest m;
  m.step = step;
  m.applied_steps = step;
  m.model = model;
  m.layout = {.dp = dp, .pp = pp, .tp = tp, .zero_stage = dp > 1 ? 3 : 0};
  m.tensors = tensor_records(model, tp, pp > 1 ? stages : std::vector<nn::ParamRange>{});
  m.optimizer = {.type = "adamw", .updates = step};
  m.data = {.position = step * 8, .epoch = 0, .samples_per_epoch = 800};
  m.rng = {.seed = 1234, .task_seed = 1};
  m.config_hash = 42;
  m.config = R"({"train_batch_size":8})";
  const char* const states[] = {kParamState, kExpAvgState, kExpAvgSqState};
  for (int t = 0; t < tp; ++t) {
    const nn::ModelLayout slice = nn::model_layout(model, {.rank = t, .size = tp});
    // Slice t of each state, from the whole model's values.
    std::vector<std::vector<float>> sliced(3, std::vector<float>(slice.num_params()));
    nn::for_each_slice_run(whole, slice, [&](size_t w, size_t at, size_t n) {
      for (int k = 0; k < 3; ++k) {
        for (size_t i = 0; i < n; ++i)
          sliced[k][at + i] = value(k, static_cast<int64_t>(w + i));
      }
    });
    for (int p = 0; p < pp; ++p) {
      const nn::ParamRange& stage = stages[static_cast<size_t>(p)];
      for (int d = 0; d < dp; ++d) {
        auto [b, e] = partition(static_cast<int64_t>(stage.size()), dp, d);
        b += static_cast<int64_t>(stage.begin);
        e += static_cast<int64_t>(stage.begin);
        std::vector<StateArray> arrays;
        for (int k = 0; k < 3; ++k) {
          arrays.push_back(
              {.state = states[k], .data = sliced[k].data() + b, .n = static_cast<size_t>(e - b)});
        }
        const Owner owner{.d = d, .p = p, .t = t};
        absl::StatusOr<std::vector<ShardEntry>> entries =
            write_shard_file(env, step_dir(dir, step), shard_file_name(owner), arrays);
        if (!entries.ok()) return entries.status();
        m.shards.push_back({.file = shard_file_name(owner),
                            .owner = owner,
                            .begin = b,
                            .end = e,
                            .entries = *entries});
      }
    }
  }
  return commit_checkpoint(env, dir, m, keep);
}

// A ZeRO run over dp ranks (pp = tp = 1): rank r saves its partition.
inline absl::Status save_partitioned(io::Env* env, const std::string& dir, int64_t step,
                                     const nn::ModelConfig& model, int dp,
                                     const std::function<float(int, int64_t)>& value,
                                     int keep = 2) {
  return save_sliced(env, dir, step, model, dp, 1, 1, value, keep);
}

}  // namespace troupe::checkpoint::testing
