// How an elastic job splits its global batch at a new size (docs/elasticity.md).
// The global batch G = train_batch_size never changes; at dp ranks each rank
// runs micro-batches of m samples, a of them a step, with m a dp = G. The
// planner takes the largest allowed m that splits G evenly (fewest
// accumulation steps, as DeepSpeed's elasticity prefers), so that a step
// trains on the same G samples of the data, in the same order of positions,
// at every size (actors/data/sampler.h): only the sums' order changes.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainers/config.h"

namespace troupe::trainers {

struct BatchSplit {
  int dp = 1;
  int64_t micro_batch = 1;  // m, per rank
  int64_t grad_accum = 1;   // a
  // "32 = 4 x 4 x 2 (dp x micro-batch x accumulation)".
  std::string describe(int64_t global_batch) const;
};

// The split of `config`'s train_batch_size over `dp` ranks: the largest
// micro-batch allowed (elasticity.micro_batch_sizes, or any up to
// train_micro_batch_size_per_gpu when that is empty) that divides
// train_batch_size / dp. FailedPrecondition saying why for a dp outside
// [elasticity.min_dp, elasticity.max_dp], or one that no allowed
// micro-batch fits (train_batch_size not a multiple of dp x m for any m).
absl::StatusOr<BatchSplit> plan_batch(const TrainConfig& config, int dp);

// `config` with dp and the batch keys of `split` (the global batch unchanged).
TrainConfig with_split(TrainConfig config, const BatchSplit& split);

}  // namespace troupe::trainers
