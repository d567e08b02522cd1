#include "trainers/elastic_scaler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "actors/step_clock.h"
#include "core/cluster/detail/resources.h"
#include "trainers/job_device.h"

namespace troupe::trainers {
namespace {

// How long a resize may wait for room on the nodes it chose, and for the
// head to name the ranks a failed step lost.
constexpr absl::Duration kResizeTimeout = absl::Seconds(60);
constexpr absl::Duration kDetectBudget = absl::Seconds(10);

// A live worker that hosts no rank of the job, takes new work and has room
// for a rank (`rank`: a CPU, and a GPU on CUDA).
bool has_room(const cluster::NodeStatus& n, const std::set<uint32_t>& busy,
              const cluster::Resources& rank) {
  if (n.state != cluster::NodeState::kAlive || n.info.kind != cluster::NodeKind::kWorker ||
      !n.ready || n.draining || busy.contains(n.info.index)) {
    return false;
  }
  absl::StatusOr<cluster::Resources> free = cluster::Resources::parse(n.available);
  return free.ok() && free->contains(rank);
}

std::string nodes_text(const std::vector<int32_t>& nodes, const char* what) {
  std::vector<std::string> names;
  for (int32_t n : nodes)
    names.push_back(absl::StrCat(n));
  return absl::StrCat(nodes.size() == 1 ? "node " : "nodes ", absl::StrJoin(names, ", "), " ",
                      what);
}

}  // namespace

std::string ResizeReport::summary() const {
  return absl::StrFormat("step %d: dp %d -> %d (%s); global batch %s; resized in %.2f s", step,
                         from_dp, to_dp, cause, split.describe(global_batch), ms / 1000);
}

ElasticScaler::ElasticScaler(Cluster& cluster, ElasticMesh& mesh, TrainConfig config)
    : cluster_(cluster), mesh_(mesh), config_(std::move(config)) {
  config_.elasticity.min_dp = smallest_dp(config_);
}

int smallest_dp(const TrainConfig& config) {
  const bool partitioned_model = config.zero.stage >= 2 && config.parallel.dp > 1;
  return partitioned_model ? std::max(config.elasticity.min_dp, 2) : config.elasticity.min_dp;
}

std::vector<std::string> ElasticScaler::take_notes() {
  return std::exchange(notes_, {});
}

void ElasticScaler::note(std::string text) {
  if (std::find(said_.begin(), said_.end(), text) != said_.end()) return;
  said_.push_back(text);
  notes_.push_back(std::move(text));
}

absl::StatusOr<BatchSplit> ElasticScaler::fit(int want, int floor) const {
  if (want < floor) {
    return absl::FailedPreconditionError(
        absl::StrCat("dp ", want, " is below elasticity's min_dp ", floor));
  }
  absl::Status first;
  for (int dp = want; dp >= std::max(1, floor); --dp) {
    absl::StatusOr<BatchSplit> split = plan_batch(config_, dp);
    if (split.ok()) return split;
    if (first.ok()) first = split.status();
  }
  return first.ok() ? absl::FailedPreconditionError("no size to go to") : first;
}

bool ElasticScaler::may_resize() const {
  return !looked_ || cluster_.membership_version() != seen_version_;
}

absl::StatusOr<std::optional<ResizeReport>> ElasticScaler::before_step(int64_t step) {
  if (!may_resize()) return std::nullopt;
  const uint64_t version = cluster_.membership_version();
  const double start = actors::now_ms();
  absl::StatusOr<cluster::ClusterStatus> status = cluster_.status();
  if (!status.ok()) {
    // (The head may be restarting: the job goes on, and looks again.)
    note(absl::StrCat("the cluster's status is unavailable (", status.status().message(),
                      "); the job stays at dp ", mesh_.dp()));
    return std::nullopt;
  }
  const int dp = mesh_.dp();
  const std::vector<std::optional<uint32_t>> at = mesh_.rank_nodes(*status);
  // A rank that is not alive is recovery's, or the next failed step's: no
  // resize around it (looked at again at the next step).
  if (std::any_of(at.begin(), at.end(), [](const auto& n) { return !n.has_value(); })) {
    return std::nullopt;
  }
  looked_ = true;
  seen_version_ = version;
  std::set<uint32_t> busy, draining;
  for (const std::optional<uint32_t>& n : at)
    busy.insert(*n);
  for (const cluster::NodeStatus& n : status->nodes) {
    if (n.state == cluster::NodeState::kAlive && n.draining) draining.insert(n.info.index);
  }
  std::vector<int> keep;
  std::vector<int32_t> drained;
  for (int d = 0; d < dp; ++d) {
    if (draining.contains(*at[d])) {
      if (std::find(drained.begin(), drained.end(), *at[d]) == drained.end()) {
        drained.push_back(static_cast<int32_t>(*at[d]));
      }
    } else {
      keep.push_back(d);
    }
  }
  std::vector<int32_t> joined;
  const cluster::Resources rank = *cluster::Resources::parse(stage_resources(config_));
  for (const cluster::NodeStatus& n : status->nodes) {
    if (has_room(n, busy, rank)) joined.push_back(static_cast<int32_t>(n.info.index));
  }
  if (keep.empty() && !joined.empty()) {
    // Every rank is on a draining node: the job grows onto the nodes that
    // joined first, and leaves the drained ones at the next step.
    for (int d = 0; d < dp; ++d)
      keep.push_back(d);
    drained.clear();
    looked_ = false;
  }
  const int kept = static_cast<int>(keep.size());
  const int room = std::max(0, config_.elasticity.max_dp - kept);
  if (static_cast<int>(joined.size()) > room) joined.resize(room);
  if (drained.empty() && joined.empty()) return std::nullopt;

  // The largest size the batch rule allows, from every node with room down
  // to min_dp (a drain) or one more than now (a growth).
  const int want = kept + static_cast<int>(joined.size());
  const int floor = drained.empty() ? dp + 1 : config_.elasticity.min_dp;
  std::string cause;
  if (!drained.empty()) cause = nodes_text(drained, "drained");
  if (!joined.empty()) {
    absl::StrAppend(&cause, cause.empty() ? "" : ", ", nodes_text(joined, "joined"));
  }
  if (kept == 0) {
    note(absl::StrCat(cause, ": every rank of the job is on a draining node; it stays at dp ", dp,
                      " until a node with room joins"));
    return std::nullopt;
  }
  absl::StatusOr<BatchSplit> split = fit(want, floor);
  if (!split.ok()) {
    note(absl::StrCat(cause, ", but the job stays at dp ", dp, ": ", split.status().message()));
    return std::nullopt;
  }
  if (split->dp >= kept) {
    joined.resize(split->dp - kept);
  } else {
    joined.clear();
    keep.resize(split->dp);  // the batch rule takes a smaller size than the ranks kept
  }
  if (absl::Status s = mesh_.resize(keep, joined, absl::Now() + kResizeTimeout); !s.ok()) {
    // Before the group was formed at the new size the job is as it was: it
    // goes on, and says why (ElasticMesh::resize).
    if (absl::IsInternal(s)) return s;
    note(absl::StrCat(cause, ", but the job stays at dp ", dp, ": ", s.message()));
    return std::nullopt;
  }
  ResizeReport report{.step = step,
                      .from_dp = dp,
                      .to_dp = split->dp,
                      .cause = std::move(cause),
                      .split = *split,
                      .global_batch = config_.train_batch_size,
                      .ms = actors::now_ms() - start};
  history_.push_back(report);
  return report;
}

absl::StatusOr<ResizeReport> ElasticScaler::shrink_after_loss(int64_t step,
                                                              const absl::Status& failure,
                                                              TrainerController& controller) {
  const double start = actors::now_ms();
  absl::StatusOr<std::vector<LostMember>> lost = mesh_.find_lost(absl::Now() + kDetectBudget);
  if (!lost.ok()) return lost.status();
  if (lost->empty()) return absl::NotFoundError("no rank of the job was lost");
  const int dp = mesh_.dp();
  std::set<int> gone;
  std::vector<std::string> who;
  for (const LostMember& m : *lost) {
    gone.insert(m.at.d);
    who.push_back(absl::StrCat(actors::to_string(m.at), " (", m.reason, ")"));
  }
  std::vector<int> keep;
  for (int d = 0; d < dp; ++d) {
    if (!gone.contains(d)) keep.push_back(d);
  }
  const std::string cause = absl::StrCat("lost ", absl::StrJoin(who, ", "));
  if (keep.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(failure.message(), "; every rank was lost (", cause, ")"));
  }
  const int kept = static_cast<int>(keep.size());
  absl::StatusOr<BatchSplit> split = fit(kept, config_.elasticity.min_dp);
  if (!split.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(failure.message(), "; ", cause,
                     ", and the job cannot go on smaller: ", split.status().message()));
  }
  // The survivors drop what they hold of the failed step (the lost ranks'
  // calls fail: that is fine); a size below the survivors' count leaves the
  // last of them out too.
  std::vector<Future<void>> discarding;
  for (const MeshMember& m : controller.members())
    discarding.push_back(m.stage->discard(step));
  for (Future<void>& f : discarding)
    std::move(f).get(kResizeTimeout).IgnoreError();
  keep.resize(split->dp);
  // (A commit that lost shards was applied by the survivors: it stands, and
  // the lost shards go with their ranks.)
  if (absl::Status s = controller.restore(controller.state()); !s.ok()) return s;
  if (absl::Status s = mesh_.resize(keep, {}, absl::Now() + kResizeTimeout); !s.ok()) return s;
  ResizeReport report{.step = step,
                      .from_dp = dp,
                      .to_dp = split->dp,
                      .cause = cause,
                      .split = *split,
                      .global_batch = config_.train_batch_size,
                      .ms = actors::now_ms() - start};
  history_.push_back(report);
  return report;
}

}  // namespace troupe::trainers
