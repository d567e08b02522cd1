#include "trainers/elastic_batch.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace troupe::trainers {

std::string BatchSplit::describe(int64_t global_batch) const {
  return absl::StrCat(global_batch, " = ", dp, " x ", micro_batch, " x ", grad_accum,
                      " (dp x micro-batch x accumulation)");
}

absl::StatusOr<BatchSplit> plan_batch(const TrainConfig& config, int dp) {
  const ElasticityConfig& e = config.elasticity;
  const int64_t global = config.train_batch_size;
  if (dp < e.min_dp || dp > e.max_dp) {
    return absl::FailedPreconditionError(absl::StrCat(
        "dp ", dp, " is outside elasticity's [min_dp ", e.min_dp, ", max_dp ", e.max_dp, "]"));
  }
  std::vector<int64_t> allowed = e.micro_batch_sizes;
  if (allowed.empty()) {
    for (int64_t m = 1; m <= config.micro_batch_size; ++m)
      allowed.push_back(m);
  }
  for (auto m = allowed.rbegin(); m != allowed.rend(); ++m) {
    if (global % (*m * dp) == 0) {
      return BatchSplit{.dp = dp, .micro_batch = *m, .grad_accum = global / (*m * dp)};
    }
  }
  std::string sizes = e.micro_batch_sizes.empty()
                          ? absl::StrCat("1 to ", config.micro_batch_size)
                          : absl::StrCat("one of [", absl::StrJoin(e.micro_batch_sizes, ", "), "]");
  return absl::FailedPreconditionError(
      absl::StrCat("the global batch ", global, " cannot be split over dp ", dp, ": it is not ", dp,
                   " x a micro-batch of ", sizes, " x a whole number of accumulation steps"));
}

TrainConfig with_split(TrainConfig config, const BatchSplit& split) {
  config.parallel.dp = split.dp;
  config.micro_batch_size = split.micro_batch;
  config.gradient_accumulation_steps = split.grad_accum;
  return config;
}

}  // namespace troupe::trainers
