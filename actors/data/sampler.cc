#include "actors/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/data/random.h"

namespace troupe::actors {

absl::StatusOr<DistributedSampler> DistributedSampler::create(const SamplerOptions& options) {
  auto at_least_one = [](const char* name, int64_t value) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: ", name, " is ", value, ", expected >= 1"));
  };
  if (absl::Status s = at_least_one("micro_batch", options.micro_batch); !s.ok()) return s;
  if (absl::Status s = at_least_one("grad_accum", options.grad_accum); !s.ok()) return s;
  if (absl::Status s = at_least_one("dp", options.dp); !s.ok()) return s;
  if (options.rank < 0 || options.rank >= options.dp) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: rank ", options.rank, " is not in [0, dp = ", options.dp, ")"));
  }
  DistributedSampler sampler(options);
  const int64_t g = sampler.global_batch();
  if (options.num_samples < g) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler: ", options.num_samples, " samples are fewer than one global batch (",
                     options.micro_batch, " micro_batch x ", options.grad_accum, " grad_accum x ",
                     options.dp, " dp = ", g, ")"));
  }
  return sampler;
}

std::vector<int64_t> DistributedSampler::permutation(int64_t epoch) const {
  std::vector<int64_t> perm(static_cast<size_t>(options_.num_samples));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  if (!options_.shuffle) return perm;
  SplitMix64 rng(derive_seed(options_.seed, static_cast<uint64_t>(epoch)));
  for (size_t i = perm.size(); i > 1; --i) {
    std::swap(perm[i - 1], perm[rng.below(i)]);
  }
  return perm;
}

const std::vector<int64_t>& DistributedSampler::cached_permutation(int64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_ = permutation(epoch);
    cached_epoch_ = epoch;
  }
  return cached_;
}

int64_t DistributedSampler::sample_at(int64_t position) const {
  const int64_t offset = offset_in_epoch(position);
  if (!options_.shuffle) return offset;
  return cached_permutation(epoch_of(position))[static_cast<size_t>(offset)];
}

std::vector<int64_t> DistributedSampler::micro_batch_indices(int64_t position) const {
  std::vector<int64_t> ids(static_cast<size_t>(options_.micro_batch));
  for (int k = 0; k < options_.micro_batch; ++k) {
    ids[static_cast<size_t>(k)] = sample_at(position + options_.rank + int64_t{k} * options_.dp);
  }
  return ids;
}

int64_t DistributedSampler::rebase_position(int64_t position,
                                            int64_t from_samples_per_epoch) const {
  const int64_t epoch = position / from_samples_per_epoch;
  const int64_t offset = position % from_samples_per_epoch;
  return epoch * samples_per_epoch() + std::min(offset, samples_per_epoch());
}

}  // namespace troupe::actors
