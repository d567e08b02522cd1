#include "trainers/trainer_controller.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nn/optim/clip.h"
#include "trainers/step_reports.h"

namespace troupe::trainers {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status with_step(int64_t step, const std::string& what, const absl::Status& s) {
  return Prefixed(absl::StrCat("step ", step, ": ", what), s);
}

// How long a member's process has to say how far its step got.
constexpr absl::Duration kProgressTimeout = absl::Seconds(5);

// The actor behind a call is gone (its process died, it was killed): what it
// held is lost, and asking it again is pointless.
bool is_loss(const absl::Status& s) {
  return IsActorDied(s) || absl::IsUnavailable(s);
}

const absl::Status& status_of(const absl::Status& s) {
  return s;
}

template <class T>
absl::Status status_of(const absl::StatusOr<T>& r) {
  return r.status();
}

}  // namespace

template <class T>
auto TrainerController::await_member(Future<T>& f, size_t i, absl::Time deadline) -> Result<T> {
  Result<T> r = wait_for_member(f, i, deadline);
  // (A survivor's call fails with a loss too when its peer was lost: the
  // head tells which member is gone.)
  if (is_loss(status_of(r)) && i < gone_.size() && options_.member_lost &&
      !options_.member_lost(members_[i].at).ok()) {
    gone_[i] = true;
  }
  return r;
}

template <class T>
auto TrainerController::wait_for_member(Future<T>& f, size_t i, absl::Time deadline) const
    -> Result<T> {
  if (!options_.member_lost) return f.get_until(deadline);
  for (;;) {
    const absl::Time until = std::min(deadline, absl::Now() + options_.member_poll);
    auto r = f.get_until(until);
    if (!f.valid() || absl::Now() >= deadline) {  // done, or out of time
      if (absl::Status lost = loss_behind(i, status_of(r)); !lost.ok()) return lost;
      return r;
    }
    if (absl::Status lost = options_.member_lost(members_[i].at); !lost.ok()) return lost;
  }
}

absl::Status TrainerController::loss_behind(size_t i, const absl::Status& s) const {
  if (s.ok() || is_loss(s) || !options_.member_lost) return absl::OkStatus();
  absl::Status lost = options_.member_lost(members_[i].at);
  if (lost.ok()) return lost;
  return absl::Status(lost.code(), absl::StrCat(lost.message(),
                                                "; its replacement, not yet "
                                                "restored, answered: ",
                                                s.message()));
}

std::vector<LostMember> TrainerController::find_hung(int64_t step,
                                                     const std::vector<size_t>& pending,
                                                     bool one_finished) {
  // Every member's progress, the finished ones' too (they issued all of the
  // step's collectives).
  std::vector<Future<actors::StepProgress>> asking;
  for (MeshMember& m : members_)
    asking.push_back(m.shard->progress());
  const absl::Time answer_by = absl::Now() + std::min(options_.step_timeout, kProgressTimeout);
  std::vector<std::optional<actors::StepProgress>> progress(members_.size());
  for (size_t i = 0; i < members_.size(); ++i) {
    absl::StatusOr<actors::StepProgress> p =
        std::move(asking[i]).get(std::max(answer_by - absl::Now(), absl::ZeroDuration()));
    if (p.ok()) progress[i] = *p;
  }
  // The fewest collectives issued by a member of the group's generation.
  std::optional<uint64_t> generation;
  bool one_generation = true;
  uint64_t fewest = UINT64_MAX;
  size_t ahead = members_.size();  // a member that issued more than the fewest
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!progress[i] || !progress[i]->grouped) continue;
    if (generation && *generation != progress[i]->generation) one_generation = false;
    generation = progress[i]->generation;
    fewest = std::min(fewest, progress[i]->collectives_issued);
  }
  for (size_t i = 0; i < members_.size() && generation; ++i) {
    if (progress[i] && progress[i]->grouped && progress[i]->collectives_issued > fewest) {
      ahead = i;
    }
  }
  const std::string timeout =
      absl::StrCat("no answer to run_step of step ", step, " within step_timeout_s ",
                   absl::FormatDuration(options_.step_timeout));
  std::vector<LostMember> hung;
  for (size_t i : pending) {
    std::string why;
    if (!progress[i]) {
      why = ", and its process does not answer";
    } else if (!progress[i]->grouped) {
      why = ", and it waits for no other rank";
    } else if (!one_generation || progress[i]->collectives_issued != fewest) {
      continue;  // it waits for another rank (or which cannot be told)
    } else if (ahead < members_.size()) {
      why = absl::StrCat(": its stage is stuck before collective ", fewest + 1,
                         " of its group, which ", actors::to_string(members_[ahead].at),
                         " issued and waits in");
    } else if (one_finished) {
      why = ", after the other ranks finished the step";
    } else {
      continue;
    }
    hung.push_back({.at = members_[i].at, .reason = timeout + why});
  }
  // Fencing every rank would end the job rather than mend it: a failure that
  // takes all of them is not one rank's.
  if (hung.size() == members_.size() && members_.size() > 1) hung.clear();
  return hung;
}

absl::StatusOr<std::vector<MeshMember>> TrainerController::in_mesh_order(
    const actors::Mesh& mesh, std::vector<MeshMember> members) {
  if (mesh.dp < 1 || mesh.pp < 1 || mesh.tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: a mesh of dp ", mesh.dp, " x pp ", mesh.pp, " x tp ", mesh.tp));
  }
  if (members.size() != static_cast<size_t>(mesh.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: ", members.size(), " members for a mesh of ", mesh.size()));
  }
  std::vector<MeshMember> ordered(members.size());
  std::vector<bool> seen(members.size(), false);
  for (MeshMember& m : members) {
    if (!actors::contains(mesh, m.at)) {
      return absl::InvalidArgumentError(absl::StrCat("trainer: member ", actors::to_string(m.at),
                                                     " lies outside the mesh dp ", mesh.dp,
                                                     " x pp ", mesh.pp, " x tp ", mesh.tp));
    }
    const int i = actors::index_of(mesh, m.at);
    if (seen[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer: two members at ", actors::to_string(m.at)));
    }
    if (m.stage == nullptr || m.shard == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("trainer: member ", actors::to_string(m.at), " lacks a stage or a shard"));
    }
    if (m.buddy < -1 || m.buddy >= mesh.size() || m.buddy == actors::index_of(mesh, m.at)) {
      return absl::InvalidArgumentError(absl::StrCat("trainer: member ", actors::to_string(m.at),
                                                     " has buddy ", m.buddy, " in a mesh of ",
                                                     mesh.size()));
    }
    seen[i] = true;
    ordered[i] = std::move(m);
  }
  return ordered;
}

absl::StatusOr<TrainerController> TrainerController::create(actors::Mesh mesh,
                                                            std::vector<MeshMember> members,
                                                            ControllerOptions options) {
  absl::StatusOr<std::vector<MeshMember>> ordered = in_mesh_order(mesh, std::move(members));
  if (!ordered.ok()) return ordered.status();
  TrainerController controller(mesh, *std::move(ordered), std::move(options));
  if (controller.options_.dynamic_loss_scale) {
    absl::StatusOr<nn::DynamicLossScaler> scaler =
        nn::DynamicLossScaler::create(*controller.options_.dynamic_loss_scale);
    if (!scaler.ok()) return scaler.status();
    controller.scaler_ = *std::move(scaler);
  }
  return controller;
}

ControllerState TrainerController::state() const {
  ControllerState s{.next_step = next_step_,
                    .applied = applied_,
                    .loss_scaler = std::nullopt,
                    .data_position = data_position_,
                    .epoch = epoch_};
  if (scaler_) s.loss_scaler = scaler_->state();
  return s;
}

absl::Status TrainerController::restore(const ControllerState& state) {
  if (state.next_step < 1 || state.applied < 0 || state.applied >= state.next_step) {
    return absl::InvalidArgumentError(absl::StrCat("trainer: restore to step ", state.next_step,
                                                   " with ", state.applied, " updates applied"));
  }
  if (state.loss_scaler.has_value() != options_.dynamic_loss_scale.has_value()) {
    return absl::InvalidArgumentError(
        state.loss_scaler ? "trainer: the checkpoint has a dynamic loss scaler's state, but the "
                            "config has no dynamic fp16 loss scaling"
                          : "trainer: the config scales the loss dynamically (fp16), but the "
                            "checkpoint has no loss scaler's state");
  }
  if (state.loss_scaler) {
    absl::StatusOr<nn::DynamicLossScaler> scaler =
        nn::DynamicLossScaler::restore(*options_.dynamic_loss_scale, *state.loss_scaler);
    if (!scaler.ok()) return scaler.status();
    scaler_ = *std::move(scaler);
  }
  next_step_ = state.next_step;
  applied_ = state.applied;
  data_position_ = state.data_position;
  epoch_ = state.epoch;
  lost_shards_.clear();
  hung_.clear();
  return absl::OkStatus();
}

double TrainerController::loss_scale() const {
  if (scaler_) return scaler_->scale();
  return options_.static_loss_scale > 0 ? options_.static_loss_scale : 1.0;
}

absl::Status TrainerController::discard_all(int64_t step) {
  std::vector<std::pair<size_t, Future<void>>> pending;  // (member, its call)
  for (size_t i = 0; i < members_.size(); ++i) {
    if (i < gone_.size() && gone_[i]) continue;
    pending.emplace_back(i, members_[i].stage->discard(step));
  }
  absl::Status first;
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  for (auto& [i, call] : pending)
    first.Update(await_member(call, i, deadline));
  return first;
}

absl::Status TrainerController::prepare_all(int64_t step) {
  std::vector<Future<void>> pending;
  for (MeshMember& m : members_)
    pending.push_back(m.shard->prepare(step));
  absl::Status first;
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  for (size_t i = 0; i < pending.size(); ++i) {
    absl::Status s = await_member(pending[i], i, deadline);
    if (!s.ok() && first.ok()) first = with_step(step, "prepare: ", s);
  }
  return first;
}

absl::Status TrainerController::replicate_all(const actors::CommitRequest& commit) {
  std::vector<std::pair<size_t, Future<void>>> pending;  // (member, its call)
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i].buddy >= 0) pending.emplace_back(i, members_[i].shard->replicate(commit));
  }
  absl::Status first;
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  for (auto& [i, f] : pending) {
    absl::Status s = await_member(f, i, deadline);
    if (!s.ok() && first.ok()) first = with_step(commit.step, "replicating to a buddy: ", s);
  }
  return first;
}

absl::Status TrainerController::connect_buddies() {
  std::vector<Future<void>> pending;
  for (MeshMember& m : members_) {
    if (m.buddy >= 0) pending.push_back(m.shard->set_buddy(*members_[m.buddy].shard));
  }
  absl::Status first;
  for (Future<void>& f : pending)
    first.Update(std::move(f).get(options_.step_timeout));
  return first;
}

absl::Status TrainerController::resize(actors::Mesh mesh, std::vector<MeshMember> members) {
  if (!lost_shards_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer: resize while ", lost_shards_.size(),
                     " shards have not applied the last committed step (restore them first)"));
  }
  absl::StatusOr<std::vector<MeshMember>> ordered = in_mesh_order(mesh, std::move(members));
  if (!ordered.ok()) return ordered.status();
  mesh_ = mesh;
  members_ = *std::move(ordered);
  owned_.clear();  // the stages report their ranges again at the next step
  hung_.clear();
  return absl::OkStatus();
}

absl::Status TrainerController::replace_member(const actors::Coordinate& at,
                                               std::shared_ptr<StageEndpoint> stage,
                                               std::shared_ptr<ShardEndpoint> shard) {
  if (!actors::contains(mesh_, at) || stage == nullptr || shard == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("trainer: replacing ", actors::to_string(at), " in a mesh of dp ", mesh_.dp,
                     " x pp ", mesh_.pp, " x tp ", mesh_.tp, stage && shard ? "" : " with none"));
  }
  MeshMember& m = members_[static_cast<size_t>(actors::index_of(mesh_, at))];
  m.stage = std::move(stage);
  m.shard = std::move(shard);
  return absl::OkStatus();
}

absl::Status TrainerController::commit_all(const actors::CommitRequest& commit) {
  std::vector<Future<int64_t>> pending;
  for (MeshMember& m : members_)
    pending.push_back(m.shard->commit(commit));
  std::vector<std::string> lost, refused;
  absl::Status first;
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  for (size_t i = 0; i < pending.size(); ++i) {
    absl::StatusOr<int64_t> applied = await_member(pending[i], i, deadline);
    if (applied.ok() && *applied == commit.step) continue;
    absl::Status s = applied.ok()
                         ? absl::InternalError(absl::StrCat("commit answered step ", *applied))
                         : applied.status();
    // Every shard was prepared, so a live one can apply the step: ask again
    // (a commit of the step already applied succeeds without applying it
    // twice), then ask where it stands.
    if (!is_loss(s)) {
      absl::StatusOr<int64_t> again = members_[i].shard->commit(commit).get(options_.step_timeout);
      if (again.ok() && *again == commit.step) continue;
      absl::StatusOr<int64_t> where = members_[i].shard->applied_step().get(options_.step_timeout);
      if (where.ok() && *where == commit.step) continue;
      if (!again.ok()) s = again.status();
      if (absl::Status gone = loss_behind(i, s); !gone.ok()) s = gone;
    }
    lost_shards_.push_back(members_[i].at);
    (is_loss(s) ? lost : refused).push_back(actors::to_string(members_[i].at));
    if (first.ok()) first = s;
  }
  if (lost_shards_.empty()) return absl::OkStatus();
  std::string which;
  if (!lost.empty()) which = absl::StrCat("lost the shards at ", absl::StrJoin(lost, ", "));
  if (!refused.empty()) {
    absl::StrAppend(&which, which.empty() ? "" : "; ", "the shards at ",
                    absl::StrJoin(refused, ", "), " refused it after they had prepared it");
  }
  return Prefixed(
      absl::StrCat("step ", commit.step, ": commit: every other shard applied it; ", which, ": "),
      first);
}

absl::StatusOr<StepOutcome> TrainerController::step(int64_t step) {
  if (step != next_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("trainer: step ", step, " requested, but the next step is ", next_step_));
  }
  if (!lost_shards_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("trainer: step ", step,
                                                      ": the job lost shards in step ", step - 1,
                                                      " and must be restored before it can go on"));
  }
  hung_.clear();
  gone_.assign(members_.size(), false);
  const double start = now_ms();
  StepOutcome out;
  out.step = step;
  out.dp = mesh_.dp;
  out.loss_scale = loss_scale();
  actors::StepRequest request{.step = step, .loss_scale = static_cast<float>(out.loss_scale)};
  std::vector<Future<actors::StepReport>> running;
  for (MeshMember& m : members_)
    running.push_back(m.stage->run_step(request));
  std::vector<actors::StepReport> reports;
  absl::Status failed;
  std::vector<size_t> pending;  // no answer by the deadline
  const absl::Time deadline = absl::Now() + options_.step_timeout;
  for (size_t i = 0; i < running.size(); ++i) {
    absl::StatusOr<actors::StepReport> report = await_member(running[i], i, deadline);
    if (!report.ok()) {
      if (running[i].valid() && absl::IsDeadlineExceeded(report.status())) pending.push_back(i);
      failed.Update(report.status());
    } else if (!(report->at == members_[i].at)) {
      failed.Update(
          absl::InternalError(absl::StrCat("the stage at ", actors::to_string(members_[i].at),
                                           " reported for ", to_string(report->at))));
    } else {
      reports.push_back(*std::move(report));
    }
  }
  if (!pending.empty()) {
    // The stages still run the step: discarding would wait for them.
    // (Pipeline stages issue different collectives, and wait on their pipe
    // group, not only on their data-parallel one: none is singled out yet.)
    if (mesh_.pp == 1) hung_ = find_hung(step, pending, !reports.empty());
    std::vector<std::string> who;
    for (const LostMember& h : hung_)
      who.push_back(absl::StrCat(actors::to_string(h.at), " (", h.reason, ")"));
    std::vector<std::string> late;
    for (size_t i : pending)
      late.push_back(actors::to_string(members_[i].at));
    return absl::DeadlineExceededError(absl::StrCat(
        "step ", step, ": no answer within step_timeout_s ",
        absl::FormatDuration(options_.step_timeout), " from ", absl::StrJoin(late, ", "), "; ",
        hung_.empty() ? "none of them can be singled out as hung (they wait in the same "
                        "collective: the network between them is stuck, or all of them are)"
                      : absl::StrCat("hung: ", absl::StrJoin(who, "; "))));
  }
  if (!failed.ok()) {
    discard_all(step).IgnoreError();  // the stages may be gone; the step's error is what matters
    return with_step(step, "", failed);
  }
  absl::StatusOr<StepTotals> totals = combine_reports(step, reports);
  if (!totals.ok()) {
    discard_all(step).IgnoreError();
    return totals.status();
  }
  owned_.clear();
  for (const actors::StepReport& r : reports)
    owned_.push_back(r.owned);
  out.loss = totals->loss;
  out.samples = totals->samples;
  out.tokens = totals->tokens;
  out.sample_ids = totals->sample_ids;
  out.data_position = totals->data_position;
  out.epoch = totals->epoch;
  out.compute_ms = totals->compute_ms;
  out.comm_ms = totals->comm_ms;
  out.comm_exposed_ms = totals->comm_exposed_ms;
  out.memory = totals->memory;
  out.sent = totals->sent;
  out.ranks = totals->ranks;
  out.bubble = totals->bubble;
  for (const actors::StepReport& r : reports) {
    if (!r.timeline.empty()) {
      out.timelines.push_back(
          {.at = r.at, .events = r.timeline, .schedule_ms = r.schedule_ms, .began_ms = r.began_ms});
    }
  }
  const double scale = out.loss_scale;
  if (totals->found_inf) {
    if (!scaler_) {
      discard_all(step).IgnoreError();
      return absl::InternalError(absl::StrCat(
          "step ", step, ": a gradient is inf or NaN (loss ", out.loss,
          "); lower the learning rate, or enable fp16 loss scaling if this is an fp16 run"));
    }
    if (absl::Status s = discard_all(step); !s.ok()) return with_step(step, "discard: ", s);
    if (absl::Status s = scaler_->update(true); !s.ok()) return with_step(step, "", s);
    next_step_ = step + 1;
    data_position_ = out.data_position;
    epoch_ = out.epoch;
    out.applied = false;
    out.grad_norm = INFINITY;
    out.step_ms = now_ms() - start;
    out.overhead_ms = std::max(0.0, out.step_ms - totals->stage_ms);
    last_outcome_ = out;
    return out;
  }
  out.grad_norm = std::sqrt(totals->grad_norm_sq) / scale;
  absl::StatusOr<nn::GradClip> clip =
      nn::clip_coefficient(out.grad_norm * out.grad_norm, options_.gradient_clipping);
  if (!clip.ok()) {
    discard_all(step).IgnoreError();
    return with_step(step, "clipping: ", clip.status());
  }
  out.clipped = clip->clipped;
  out.lr = options_.lr_schedule.lr_at(static_cast<int>(applied_ + 1));
  actors::CommitRequest commit{
      .step = step, .lr = out.lr, .grad_scale = static_cast<float>(clip->coef / scale)};
  const double commit_start = now_ms();
  if (absl::Status s = prepare_all(step); !s.ok()) {
    discard_all(step).IgnoreError();
    return s;
  }
  // Before the commit point: a committed step is in every replica.
  if (absl::Status s = replicate_all(commit); !s.ok()) {
    discard_all(step).IgnoreError();
    return s;
  }
  // From here on the step is applied wherever a shard lives.
  next_step_ = step + 1;
  data_position_ = out.data_position;
  epoch_ = out.epoch;
  ++applied_;
  if (scaler_) scaler_->update(false).IgnoreError();  // only refuses an overflow's update
  out.applied = true;
  const absl::Status committed = commit_all(commit);
  out.commit_ms = now_ms() - commit_start;
  out.step_ms = now_ms() - start;
  out.overhead_ms = std::max(0.0, out.step_ms - totals->stage_ms - out.commit_ms);
  last_outcome_ = out;
  if (!committed.ok()) return committed;
  return out;
}

}  // namespace troupe::trainers
