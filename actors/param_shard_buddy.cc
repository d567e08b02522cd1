// ParamShardActor's buddy replication (ZeRO; docs/fault_tolerance.md): a
// replica of a shard's state in another shard's memory, kept one committed
// step behind at most and caught up on demand.
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/failpoint.h"
#include "actors/param_shard_actor.h"
#include "actors/step_clock.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/shard_file.h"

namespace troupe::actors {

Future<void> ParamShardActor::send_seed() {
  absl::StatusOr<ShardState> state = export_state();
  if (!state.ok()) return Future<void>::failed(state.status());
  // The updates replicate() sends after it reach the buddy after it (one
  // sender's calls arrive in order); one that failed makes the replica stale
  // for good, and replicate() refuses until a new seed is held.
  auto seed = std::make_shared<SeedState>(SeedState::kInFlight);
  buddy_seed_ = seed;
  return buddy_->call(&ParamShardActor::hold_replica, *std::move(state))
      .then([seed](absl::Status held) -> absl::Status {
        *seed = held.ok() ? SeedState::kHeld : SeedState::kFailed;
        return held;
      });
}

void ParamShardActor::seed_buddy() {
  if (!buddy_ || !initialised_) return;
  static_cast<void>(send_seed());
}

Future<void> ParamShardActor::set_buddy(ActorRef<ParamShardActor> buddy) {
  buddy_ = buddy;
  buddy_seed_ = std::make_shared<SeedState>(SeedState::kNone);
  if (!initialised_) return make_ready_future();
  return send_seed();
}

Future<void> ParamShardActor::replicate(CommitRequest commit) {
  auto refuse = [&](const std::string& why) {
    return Future<void>::failed(absl::FailedPreconditionError(
        absl::StrCat(name_, ": replicate of step ", commit.step, ": ", why)));
  };
  if (!buddy_) return refuse("it has no buddy");
  if (*buddy_seed_ == SeedState::kNone || *buddy_seed_ == SeedState::kFailed) {
    return refuse("its buddy does not hold its state (no seed was sent, or it failed)");
  }
  if (prepared_ != commit.step) {
    return refuse(prepared_ == 0 ? std::string("no step is prepared")
                                 : absl::StrCat("step ", prepared_, " is the one prepared"));
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return Future<void>::failed(s.status());
  const size_t n = range_.size();
  failpoint("replicate", options_.at, commit.step);
  ReplicaUpdate update{
      .from = options_.at, .commit = commit, .grads = transport::Buffer(n * sizeof(float))};
  if (absl::Status c = nn::copy_bytes(update.grads.data(), nn::Device::cpu(), stage_grads(**s),
                                      device_, static_cast<int64_t>(n * sizeof(float)));
      !c.ok()) {
    return Future<void>::failed(c);
  }
  return buddy_->call(&ParamShardActor::hold_update, std::move(update));
}

absl::Status ParamShardActor::hold_replica(ShardState state) {
  const size_t n = state.range.size();
  if (state.data.size() != state.states.size() * n * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": a replica of ", to_string(state.from),
                                                   " of ", state.data.size(), " bytes for ",
                                                   state.states.size(), " x ", n, " values"));
  }
  Replica replica;
  replica.no_decay = nn::ranges_in_shard(layout_.no_decay_ranges(), state.range.begin, n);
  replica.state = std::move(state);
  replica_ = std::move(replica);
  return absl::OkStatus();
}

absl::Status ParamShardActor::hold_update(ReplicaUpdate update) {
  if (!replica_ || !(replica_->state.from == update.from)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": an update of step ", update.commit.step, " of ",
                     to_string(update.from), ", whose replica it does not hold"));
  }
  // The update before was committed, or this one would not be prepared.
  if (replica_->pending && replica_->pending->commit.step + 1 == update.commit.step) {
    commit_replica(replica_->pending->commit.step);
  }
  const int64_t at = replica_->state.step;
  const size_t n = replica_->state.range.size();
  if (update.commit.step <= at || update.grads.size() != n * sizeof(float)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": an update of step ", update.commit.step, " of ",
                     to_string(update.from), " for a replica after step ", at));
  }
  replica_->pending = std::move(update);
  return absl::OkStatus();
}

void ParamShardActor::commit_replica(int64_t step) {
  if (!replica_ || !replica_->pending || replica_->pending->commit.step != step) return;
  Replica& r = *replica_;
  const size_t n = r.state.range.size();
  auto* data = reinterpret_cast<float*>(r.state.data.data());
  const size_t kinds = r.state.states.size();
  float* m = kinds > 1 ? data + n : nullptr;
  float* v = kinds > 2 ? data + 2 * n : nullptr;
  const int update = static_cast<int>(r.state.updates + 1);
  // The replica is held in host memory: the CPU applies its update, with the same arithmetic.
  absl::Status applied =
      apply_update(nn::cpu_backend(), 0, r.pending->commit, update, data,
                   reinterpret_cast<float*>(r.pending->grads.data()), m, v, n, r.no_decay);
  if (!applied.ok()) return;  // the CPU's update does not fail
  r.state.updates = update;
  r.state.step = step;
  r.pending.reset();
}

absl::StatusOr<ShardState> ParamShardActor::export_replica(int64_t step) {
  if (replica_ && replica_->state.step < step) commit_replica(step);  // committed, not yet applied
  if (!replica_ || replica_->state.step != step) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": no replica of step ", step,
                     replica_ ? absl::StrCat(" (it holds ", to_string(replica_->state.from),
                                             "'s after step ", replica_->state.step, ")")
                              : std::string(" (it holds none)")));
  }
  const ShardState& r = replica_->state;
  return ShardState{.from = r.from,
                    .step = r.step,
                    .updates = r.updates,
                    .range = r.range,
                    .states = r.states,
                    .data = transport::Buffer::copy_of(r.data.bytes())};
}

Future<ShardRestoreReport> ParamShardActor::restore_from_buddy(ActorRef<ParamShardActor> buddy,
                                                               int64_t step) {
  const double start = now_ms();
  return buddy.call(&ParamShardActor::export_replica, step)
      .then([this, start](ShardState state) -> absl::StatusOr<ShardRestoreReport> {
        absl::StatusOr<ShardRestoreReport> report = import_state(std::move(state));
        if (report.ok()) report->restore_ms = now_ms() - start;
        return report;
      });
}

absl::StatusOr<ShardSaveReport> ParamShardActor::save_replica(SaveRequest request) {
  absl::StatusOr<ShardState> state = export_replica(request.step);
  if (!state.ok()) return state.status();
  const double start = now_ms();
  const size_t n = state->range.size();
  auto* data = reinterpret_cast<float*>(state->data.data());
  std::vector<checkpoint::StateArray> arrays;
  for (size_t k = 0; k < state->states.size(); ++k)
    arrays.push_back({.state = state->states[k], .data = data + k * n, .n = n});
  ShardSaveReport report;
  const Coordinate& owner = request.owner;
  report.file = checkpoint::shard_file_name({.d = owner.d, .p = owner.p, .t = owner.t});
  report.owner = owner;
  report.range = state->range;
  report.bytes = static_cast<int64_t>(state->data.size());
  absl::StatusOr<std::vector<checkpoint::ShardEntry>> entries =
      checkpoint::write_shard_file(io::Env::posix(), request.step_dir, report.file, arrays);
  if (!entries.ok()) {
    return absl::Status(entries.status().code(),
                        absl::StrCat(name_, ": writing ", report.file,
                                     " from its replica: ", entries.status().message()));
  }
  for (const checkpoint::ShardEntry& e : *entries) {
    report.entries.push_back(
        {.state = e.state, .offset = e.offset, .length = e.length, .xxh64 = e.xxh64});
  }
  report.write_ms = now_ms() - start;
  return report;
}

}  // namespace troupe::actors
