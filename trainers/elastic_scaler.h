// ElasticScaler: what `troupe train` does between steps when
// elasticity.enabled (docs/elasticity.md). It watches the cluster's nodes
// through the head and resizes the job's dp at a step boundary:
//
//   grow     a worker with room joins (or stops draining): new ranks go
//            there, up to elasticity.max_dp, one a node
//   drain    a node is drained (`troupe drain NODE`): its ranks leave
//   loss     a step failed because ranks were lost and no replacement is
//            coming: the job goes on without them, and the step runs again
//
// Every change keeps the global batch (plan_batch); a size the batch rule or
// [min_dp, max_dp] refuses is said once, with the reason, and the job stays
// at the size it has. The cluster's status is read only when its membership
// changed (Cluster::membership_version), so a step pays nothing otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/cluster.h"
#include "trainers/config.h"
#include "trainers/elastic_batch.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// What a trainer offers the scaler: its ranks, where they run, and a
// resize between steps (DataParallelTrainer::resize).
class ElasticMesh {
 public:
  virtual ~ElasticMesh() = default;
  virtual int dp() const = 0;
  // The node each rank's actors run on, rank by rank, as `status` shows
  // them; nullopt for a rank whose actors are not alive.
  virtual std::vector<std::optional<uint32_t>> rank_nodes(
      const cluster::ClusterStatus& status) const = 0;
  // Goes on over the ranks `keep` followed by one new rank per entry of
  // `target_nodes` (placed there where it has room), by `deadline`. An
  // error before the group is formed at the new size leaves the job as it
  // was (what was spawned for it is gone again); Internal once it may not
  // be (the job cannot go on).
  virtual absl::Status resize(const std::vector<int>& keep, std::vector<int32_t> target_nodes,
                              absl::Time deadline) = 0;
  // The ranks lost since the job last stood whole (MeshRepair::find_lost).
  virtual absl::StatusOr<std::vector<LostMember>> find_lost(absl::Time deadline) = 0;
};

// One change of size, as the progress line, the metrics and the summary
// show it.
struct ResizeReport {
  int64_t step = 0;  // the step run next, at the new size (after a loss: again)
  int from_dp = 0;
  int to_dp = 0;
  std::string cause;  // "node 4 joined", "node 3 drained", "lost d1.p0.t0 (...)"
  BatchSplit split;
  int64_t global_batch = 0;
  double ms = 0;  // from the decision until the job stood at the new size
  // "step 212: dp 2 -> 3 (node 4 joined); global batch 48 = 3 x 8 x 2 (dp x
  // micro-batch x accumulation); resized in 0.41 s".
  std::string summary() const;
};

// The smallest dp the job goes to: elasticity.min_dp, and 2 for a ZeRO-2/3
// job (at dp 1 the model holds what they partition: another layout).
int smallest_dp(const TrainConfig& config);

class ElasticScaler {
 public:
  // `config`: the job's as the user gave it (its batch keys bound the
  // micro-batch at every size).
  ElasticScaler(Cluster& cluster, ElasticMesh& mesh, TrainConfig config);

  // Whether the cluster's membership changed since the scaler last looked
  // (before_step may resize: an async checkpoint should finish first).
  bool may_resize() const;
  // Before step `step`: resizes the job when nodes joined or are drained
  // since it last looked. nullopt when nothing changed, or the change was
  // refused or failed before the job changed (take_notes says why); a rank
  // that is not alive defers it to the next step. Errors: Internal from a
  // resize that failed part way (the job cannot go on).
  absl::StatusOr<std::optional<ResizeReport>> before_step(int64_t step);
  // Step `step` failed with `failure`: when ranks were lost, the job goes on
  // without them at the next size the batch rule allows (the survivors hold
  // the committed state), so that the step can run again. NotFound when no
  // rank was lost (the failure was of another kind); FailedPrecondition
  // when too few ranks are left (min_dp, or none) or no smaller size splits
  // the global batch.
  absl::StatusOr<ResizeReport> shrink_after_loss(int64_t step, const absl::Status& failure,
                                                 TrainerController& controller);
  // Why a change was not made, since the last call; each said once.
  std::vector<std::string> take_notes();
  const std::vector<ResizeReport>& history() const { return history_; }

 private:
  // The largest size from `want` down to `floor` that plan_batch accepts;
  // the first refusal when none does.
  absl::StatusOr<BatchSplit> fit(int want, int floor) const;
  void note(std::string text);

  Cluster& cluster_;
  ElasticMesh& mesh_;
  TrainConfig config_;
  uint64_t seen_version_ = 0;
  bool looked_ = false;
  std::vector<std::string> notes_;
  std::vector<std::string> said_;  // notes given already
  std::vector<ResizeReport> history_;
};

}  // namespace troupe::trainers
