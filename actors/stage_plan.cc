#include "actors/stage_plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace troupe::actors {

absl::StatusOr<StagePlan> plan_stage(const nn::GPTParamLayout& layout, int pp, int p,
                                     std::span<const int64_t> partition) {
  const int L = layout.num_layers();
  if (pp < 1 || pp > L) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline of ", pp, " stages for a model of ", L,
                     " layers: every stage needs at least one block (1 <= pp <= n_layer)"));
  }
  if (p < 0 || p >= pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline stage ", p, " of ", pp, ": stages are 0 .. ", pp - 1));
  }
  StagePlan plan;
  plan.stage = p;
  plan.num_stages = pp;
  if (!partition.empty()) {
    int64_t sum = 0;
    bool positive = true;
    for (int64_t blocks : partition) {
      sum += blocks;
      positive = positive && blocks > 0;
    }
    if (partition.size() != static_cast<size_t>(pp) || sum != L || !positive) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a partition of ", partition.size(), " stages and ", sum, " blocks for ", pp,
          " stages of a model of ", L, " layers: it needs pp positive counts summing to n_layer"));
    }
    int64_t begin = 0;
    for (int i = 0; i < p; ++i)
      begin += partition[static_cast<size_t>(i)];
    plan.block_begin = static_cast<int>(begin);
    plan.block_end = static_cast<int>(begin + partition[static_cast<size_t>(p)]);
  } else {
    const int base = L / pp;
    const int extra = L % pp;
    plan.block_begin = p * base + (p < extra ? p : extra);
    plan.block_end = plan.block_begin + base + (p < extra ? 1 : 0);
  }
  plan.params.begin = plan.first() ? 0 : layout.block_begin(plan.block_begin);
  plan.params.end = plan.last() ? layout.num_params() : layout.block_begin(plan.block_end);
  return plan;
}

absl::StatusOr<float> forward_stage(nn::GPT& gpt, const StagePlan& plan, const int32_t* inputs,
                                    const int32_t* targets, int B, int T, const GoOn& go_on) {
  if (absl::Status s = gpt.prepare(B, T); !s.ok()) return s;
  if (plan.first()) {
    if (absl::Status s = gpt.embed_forward(inputs); !s.ok()) return s;
  }
  if (!go_on) {
    if (absl::Status s = gpt.forward_blocks(plan.block_begin, plan.block_end); !s.ok()) return s;
  }
  for (int l = plan.block_begin; go_on && l < plan.block_end; ++l) {
    if (absl::Status s = go_on(); !s.ok()) return s;
    if (absl::Status s = gpt.forward_blocks(l, l + 1); !s.ok()) return s;
  }
  if (!plan.last()) return NAN;
  return gpt.head_forward(targets);
}

absl::Status backward_stage(nn::GPT& gpt, const StagePlan& plan, float dloss,
                            const nn::GPT::GradientsFinal& on_final, const GoOn& go_on) {
  if (plan.last()) {
    if (absl::Status s = gpt.head_backward(dloss); !s.ok()) return s;
  }
  if (!go_on) {
    if (absl::Status s = gpt.backward_blocks(plan.block_begin, plan.block_end, on_final); !s.ok()) {
      return s;
    }
  }
  for (int l = plan.block_end - 1; go_on && l >= plan.block_begin; --l) {
    if (absl::Status s = go_on(); !s.ok()) return s;
    if (absl::Status s = gpt.backward_blocks(l, l + 1, on_final); !s.ok()) return s;
  }
  if (!plan.first()) return absl::OkStatus();
  return gpt.embed_backward();
}

}  // namespace troupe::actors
