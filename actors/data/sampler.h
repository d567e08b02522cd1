// Which samples each data-parallel replica trains on: torch's
// DistributedSampler with drop_last, extended with gradient accumulation and
// a cursor that any dp can resume from.
//
// N samples, micro-batch m, replicas dp, this replica's rank d, gradient
// accumulation a. One optimizer step consumes the global batch G = m a dp;
// an epoch has steps_per_epoch = floor(N / G) steps and uses
// S = steps_per_epoch x G samples of perm_e, a permutation of [0, N) drawn
// from (seed, e) (Fisher-Yates over splitmix64; the identity without
// shuffle). The N mod G samples at the end of perm_e are not used in epoch e.
//
// The data is the sequence perm_0[0, S) perm_1[0, S) perm_2[0, S) ...; the
// global position p (samples consumed by all replicas since training began)
// indexes it: sample(p) = perm_e[o] with e = p / S, o = p mod S. The
// micro-step at p consumes sample(p), ..., sample(p + m dp - 1); replica d
// takes every dp-th, strided as torch does:
//
//   micro_batch(p, d) = { sample(p + d + k dp) : k = 0 .. m-1 }
//
// So a micro-step's samples over all replicas are the same for every dp with
// the same m dp, and the next micro-step is at p + m dp. Any p is valid
// (training that starts at 0 only visits multiples of m dp). A run resumed
// at p continues the same sequence: with the same samples_per_epoch (always
// so for the same dp, and for any dp whose G divides N as the old G did)
// nothing is lost or repeated. When a new dp changes S, map the old
// position with rebase_position() first: the run then finishes the epoch it
// was in from where it stopped (perm_e does not depend on dp) and later
// epochs are whole.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe::actors {

struct SamplerOptions {
  int64_t num_samples = 0;  // N
  int micro_batch = 1;      // m, per replica
  int grad_accum = 1;       // a
  int dp = 1;               // replicas
  int rank = 0;             // d, in [0, dp)
  uint64_t seed = 0;
  bool shuffle = true;
};

// Not safe for concurrent calls: it caches the permutation of the epoch it
// last used (N int64s).
class DistributedSampler {
 public:
  // InvalidArgument naming the option for m, a or dp < 1, a rank outside
  // [0, dp), or fewer samples than one global batch (N < G).
  [[nodiscard]] static absl::StatusOr<DistributedSampler> create(const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }
  int64_t samples_per_micro_step() const { return int64_t{options_.micro_batch} * options_.dp; }
  int64_t global_batch() const { return samples_per_micro_step() * options_.grad_accum; }  // G
  int64_t steps_per_epoch() const { return options_.num_samples / global_batch(); }
  int64_t samples_per_epoch() const { return steps_per_epoch() * global_batch(); }  // S

  // REQUIRES for these: position >= 0.
  int64_t epoch_of(int64_t position) const { return position / samples_per_epoch(); }
  int64_t offset_in_epoch(int64_t position) const { return position % samples_per_epoch(); }
  // Optimizer steps completed by position (floor(p / G)).
  int64_t step_of(int64_t position) const { return position / global_batch(); }
  // The sample the sequence holds at `position`.
  int64_t sample_at(int64_t position) const;
  // This replica's m samples of the micro-step at `position`, in order k.
  std::vector<int64_t> micro_batch_indices(int64_t position) const;

  // perm_e: the order of [0, N) in epoch `epoch`. REQUIRES: epoch >= 0.
  std::vector<int64_t> permutation(int64_t epoch) const;

  // The position in this sampler's sequence at which a run whose sampler
  // had `from_samples_per_epoch` (its info's samples_per_epoch) and stopped
  // at `position` continues: the same epoch, at the same offset, or at the
  // epoch's end if this sampler's epochs are shorter. The identity when
  // from_samples_per_epoch == samples_per_epoch().
  // REQUIRES: position >= 0, from_samples_per_epoch >= 1.
  int64_t rebase_position(int64_t position, int64_t from_samples_per_epoch) const;

 private:
  explicit DistributedSampler(const SamplerOptions& options) : options_(options) {}
  const std::vector<int64_t>& cached_permutation(int64_t epoch) const;

  SamplerOptions options_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace troupe::actors
