#include "actors/stage_plan.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"

namespace troupe::actors {

absl::StatusOr<StagePlan> plan_stage(const nn::ModelLayout& layout, int pp, int p,
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
    const std::vector<int64_t> balanced = balanced_partition(layout, pp);
    for (int i = 0; i < p; ++i)
      plan.block_begin += static_cast<int>(balanced[static_cast<size_t>(i)]);
    plan.block_end = plan.block_begin + static_cast<int>(balanced[static_cast<size_t>(p)]);
  }
  plan.params.begin = plan.first() ? 0 : layout.block_begin(plan.block_begin);
  plan.params.end = plan.last() ? layout.num_params() : layout.block_begin(plan.block_end);
  return plan;
}

std::vector<int64_t> uniform_partition(int blocks, int stages) {
  std::vector<int64_t> out(static_cast<size_t>(stages), blocks / stages);
  for (int i = 0; i < blocks % stages; ++i)
    ++out[static_cast<size_t>(i)];
  return out;
}

namespace {

// The parameters a stage of blocks [begin, end) owns.
size_t stage_params(const nn::ModelLayout& layout, int begin, int end) {
  const size_t from = begin == 0 ? 0 : layout.block_begin(begin);
  const size_t to = end == layout.num_layers() ? layout.num_params() : layout.block_begin(end);
  return to - from;
}

size_t largest_stage(const nn::ModelLayout& layout, const std::vector<int64_t>& partition) {
  size_t largest = 0;
  int begin = 0;
  for (int64_t blocks : partition) {
    const int end = begin + static_cast<int>(blocks);
    largest = std::max(largest, stage_params(layout, begin, end));
    begin = end;
  }
  return largest;
}

// The partition whose stages each own at most `bound` parameters, giving the
// earlier stages the most blocks (and each a block at least), if there is one.
std::optional<std::vector<int64_t>> fill_up_to(const nn::ModelLayout& layout, int stages,
                                               size_t bound) {
  const int L = layout.num_layers();
  std::vector<int64_t> out;
  int begin = 0;
  for (int s = 0; s < stages; ++s) {
    const int reserve = stages - s - 1;  // blocks the stages after it need
    int end = s + 1 == stages ? L : begin + 1;
    if (stage_params(layout, begin, end) > bound) return std::nullopt;
    while (s + 1 < stages && end < L - reserve && stage_params(layout, begin, end + 1) <= bound)
      ++end;
    out.push_back(end - begin);
    begin = end;
  }
  return out;
}

}  // namespace

std::vector<int64_t> balanced_partition(const nn::ModelLayout& layout, int stages) {
  const int L = layout.num_layers();
  std::vector<int64_t> even = uniform_partition(L, stages);
  const size_t even_largest = largest_stage(layout, even);
  // The smallest bound on a stage's parameters that a partition meets: the
  // filling above meets every bound some partition meets.
  size_t low = 0, high = even_largest;  // high is met
  while (low < high) {
    const size_t mid = low + (high - low) / 2;
    if (fill_up_to(layout, stages, mid)) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }
  if (even_largest == high) return even;
  return *fill_up_to(layout, stages, high);
}

absl::StatusOr<float> forward_stage(nn::Model& gpt, const StagePlan& plan, const int32_t* inputs,
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

absl::Status backward_stage(nn::Model& gpt, const StagePlan& plan, float dloss,
                            const nn::Model::GradientsFinal& on_final, const GoOn& go_on) {
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
