#include "trainers/recovery.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "nn/memory.h"
#include "trainers/checkpointer.h"
#include "trainers/trainer.h"

namespace troupe::trainers {
namespace {

// How long the head may take to declare a loss the survivors already saw (a
// collective aborted by a broken connection): the failure detector's budget
// (1 s by default) with room for a loaded machine.
constexpr absl::Duration kDetectBudget = absl::Seconds(10);
constexpr absl::Duration kRejoinTimeout = absl::Seconds(120);
// While the head does not answer: how long a member's process has to say it
// is there, how often the head is looked for, and how often the wait says
// it still waits.
constexpr absl::Duration kProbeTimeout = absl::Seconds(2);
constexpr absl::Duration kHeadPoll = absl::Milliseconds(100);
constexpr absl::Duration kNoteEvery = absl::Seconds(10);
// Time kept, before the cluster's processes give up on an absent head, for
// the survivors to save a last checkpoint.
constexpr absl::Duration kSaveMargin = absl::Seconds(10);

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Failures a lost worker causes: the lost actors' calls fail (ActorDied,
// Unavailable) and the survivors' collectives abort (Aborted), or time out.
bool may_be_a_loss(const absl::Status& s) {
  return IsActorDied(s) || absl::IsUnavailable(s) || absl::IsAborted(s) ||
         absl::IsDeadlineExceeded(s);
}

std::string seconds(double ms) {
  return absl::StrFormat("%.2f s", ms / 1000);
}

// The end of the parenthesised part that opens at `open`; npos if it does
// not close.
size_t closing(absl::string_view text, size_t open) {
  int depth = 0;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) return i;
  }
  return absl::string_view::npos;
}

// `text` without what `said` holds already, so that an error is shown once
// where one message follows another: each parenthesised part, and each
// clause after ": " (up to the end of the part it is in, or of `text`),
// found whole in `said` is left out. (A worker lost with no node to take its
// place: the step's failure names its node's loss, and the recovery's error
// named it again as why its actors were missing.)
std::string without_repeats(absl::string_view text, absl::string_view said) {
  constexpr size_t kShortest = 12;  // shorter parts are words, not errors
  std::string out(text);
  for (size_t open = out.find(" ("); open != std::string::npos;) {
    const size_t close = closing(out, open + 1);
    if (close != std::string::npos && close - open - 2 >= kShortest &&
        absl::StrContains(said, absl::string_view(out).substr(open + 2, close - open - 2))) {
      out.erase(open, close + 1 - open);
      open = out.find(" (", open);
    } else {
      open = out.find(" (", open + 1);
    }
  }
  for (size_t colon = out.find(": "); colon != std::string::npos;) {
    size_t end = colon + 2;
    for (int depth = 0; end < out.size(); ++end) {
      if (out[end] == '(') ++depth;
      if (out[end] == ')' && depth-- == 0) break;
    }
    if (end - colon - 2 >= kShortest &&
        absl::StrContains(said, absl::string_view(out).substr(colon + 2, end - colon - 2))) {
      out.erase(colon, end - colon);
    }
    colon = out.find(": ", colon + 1);
  }
  return out;
}

}  // namespace

std::string RecoveryReport::summary() const {
  // The members lost for one reason (a node's loss takes all it hosted) are
  // named together, before it.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;
  for (const LostMember& m : lost) {
    auto it = std::find_if(by_reason.begin(), by_reason.end(),
                           [&](const auto& group) { return group.first == m.reason; });
    if (it == by_reason.end()) it = by_reason.insert(by_reason.end(), {m.reason, {}});
    it->second.push_back(actors::to_string(m.at));
  }
  std::vector<std::string> who;
  for (const auto& [reason, members] : by_reason)
    who.push_back(absl::StrCat(absl::StrJoin(members, ", "), " (", reason, ")"));
  std::string out = absl::StrCat("step ", step, ": lost ", absl::StrJoin(who, ", "), "; ");
  if (checkpoint_step) {
    absl::StrAppend(&out, "no surviving copy of its state, so back to the checkpoint of step ",
                    *checkpoint_step, "; ", steps_lost, steps_lost == 1 ? " step" : " steps",
                    " to run again");
  } else {
    absl::StrAppend(&out, absl::StrJoin(restored, ", "), "; back in ", seconds(total_ms), "; ",
                    steps_lost == 0 ? "the step was committed" : "step re-run");
  }
  return out;
}

RecoveringStepper::RecoveringStepper(Trainer& trainer, Checkpointer* checkpoints,
                                     FaultToleranceConfig config)
    : trainer_(trainer), checkpoints_(checkpoints), config_(config) {}

absl::StatusOr<StepOutcome> RecoveringStepper::step(
    int64_t step, const std::function<void(const RecoveryReport&)>& on_recovery) {
  TrainerController& controller = trainer_.controller();
  if (step != controller.next_step()) return controller.step(step);  // its error
  // The time recoveries cost: all of this call but the attempt whose outcome
  // it returns (the failed attempts, the recoveries, and the steps run again
  // since a checkpoint), counted once the step stands.
  const double called = now_ms();
  const size_t recoveries_before = recoveries_.size();
  auto count_lost = [&](double kept_ms) {
    if (recoveries_.size() > recoveries_before) lost_ms_ += now_ms() - called - kept_ms;
  };
  for (;;) {
    const int64_t running = controller.next_step();
    const double attempt_start = now_ms();
    absl::StatusOr<StepOutcome> outcome = controller.step(running);
    const double attempt_ms = now_ms() - attempt_start;
    if (outcome.ok()) {
      if (outcome->step == step) {
        count_lost(attempt_ms);
        return outcome;
      }
      continue;  // a step run again after going back to a checkpoint
    }
    // A commit that lost shards applied the step everywhere else: once the
    // lost ones are restored, the step is done.
    const bool committed = controller.next_step() > running;
    if (!config_.enabled || trainer_.repair() == nullptr || !may_be_a_loss(outcome.status())) {
      return outcome.status();
    }
    // Recovers; again when the recovery itself loses a worker (a second
    // node lost while the first is replaced, or a copy's holder), as many
    // times as recoveries are left. Only recoveries made count toward
    // max_failures.
    absl::Status failure = outcome.status();
    absl::StatusOr<RecoveryReport> report;
    for (int attempt = 1;; ++attempt) {
      if (failures_ >= config_.max_failures) {
        return absl::Status(failure.code(),
                            absl::StrCat(failure.message(), " (fault_tolerance.max_failures: ",
                                         config_.max_failures, " recoveries were made already)"));
      }
      report = recover(running, failure);
      if (report.ok()) break;
      if (absl::IsNotFound(report.status())) return failure;  // no worker was lost
      // (Given up: no node, or no head, came in time.)
      if (!may_be_a_loss(report.status()) || !unrecovered_.empty()) {
        return absl::Status(
            report.status().code(),
            absl::StrCat(failure.message(), "; recovering failed: ",
                         without_repeats(report.status().message(), failure.message())));
      }
      if (attempt >= config_.max_failures - failures_) {
        return absl::Status(
            report.status().code(),
            absl::StrCat(failure.message(), "; recovering failed ", attempt,
                         attempt == 1 ? " time" : " times", " (fault_tolerance.max_failures ",
                         config_.max_failures, ", ", failures_,
                         failures_ == 1 ? " recovery" : " recoveries",
                         " made before): ", report.status().message()));
      }
      failure = Prefixed("recovering: ", report.status());
    }
    if (committed && !report->checkpoint_step) report->steps_lost = 0;
    ++failures_;
    recoveries_.push_back(*report);
    if (on_recovery) on_recovery(*report);
    if (committed && running == step && !report->checkpoint_step && controller.last_outcome()) {
      count_lost(attempt_ms);  // (the attempt that committed it)
      return *controller.last_outcome();
    }
  }
}

absl::StatusOr<RecoveryReport> RecoveringStepper::recover(int64_t step,
                                                          const absl::Status& failure) {
  const double start = now_ms();
  MeshRepair& repair = *trainer_.repair();
  TrainerController& controller = trainer_.controller();
  RecoveryReport report;
  report.started_ms = start;
  report.step = step;
  report.failure = std::string(failure.message());
  report.steps_lost = 1;

  unrecovered_.clear();
  // Nothing is found or mended without the head: while it does not answer,
  // the job says so and waits for it (as long as for a node).
  if (absl::Status s = await_head(step, absl::Now() + absl::Seconds(config_.wait_for_node_s));
      !s.ok()) {
    return s;
  }
  // Ranks found hung (step_timeout) are alive to the head until fenced.
  if (!controller.hung().empty()) {
    if (absl::Status s = repair.fence(controller.hung()); !s.ok()) {
      return Prefixed("fencing the hung ranks: ", s);
    }
  }
  absl::StatusOr<std::vector<LostMember>> lost = repair.find_lost(absl::Now() + kDetectBudget);
  if (!lost.ok()) return lost.status();
  if (lost->empty()) return absl::NotFoundError("no member of the mesh was lost");
  report.lost = *lost;
  const double detected = now_ms();
  report.detect_ms = detected - start;

  const absl::Time wait_until = absl::Now() + absl::Seconds(config_.wait_for_node_s);
  if (absl::Status s = repair.await_replacements(*lost, wait_until); !s.ok()) {
    for (const LostMember& m : *lost)
      unrecovered_.push_back(m.at);
    return s;
  }
  const double replaced = now_ms();
  report.replace_ms = replaced - detected;

  // The survivors drop what they hold of the aborted step (a replacement
  // holds nothing and refuses: that is fine), and every stage rejoins the
  // group's next generation.
  std::vector<Future<void>> discarding;
  for (const MeshMember& m : controller.members())
    discarding.push_back(m.stage->discard(step));
  for (Future<void>& f : discarding)
    std::move(f).get(kRejoinTimeout).IgnoreError();
  if (absl::Status s = repair.declare_groups(); !s.ok()) return s;
  // (A replacement of a resized job joins at the rank and split its
  // coordinate has now, not those it was spawned with.)
  std::set<int> replacements;
  for (const LostMember& l : *lost)
    replacements.insert(actors::index_of(controller.mesh(), l.at));
  const int64_t position = controller.state().data_position;
  std::vector<Future<void>> rejoining;
  for (int i = 0; i < static_cast<int>(controller.members().size()); ++i) {
    const MeshMember& m = controller.members()[i];
    std::optional<actors::StageShape> shape =
        replacements.contains(i) ? repair.shape_of(m.at, position) : std::nullopt;
    rejoining.push_back(shape ? m.stage->resize(*shape) : m.stage->rejoin());
  }
  for (Future<void>& f : rejoining) {
    if (absl::Status s = std::move(f).get(kRejoinTimeout); !s.ok()) {
      return Prefixed("re-forming the groups: ", s);
    }
  }

  absl::StatusOr<bool> restored = restore_from_replicas(*lost, report);
  if (!restored.ok()) return restored.status();
  if (*restored) {
    // Every loader back at the committed cursor (the survivors took the
    // aborted step's micro-batches already).
    const ControllerState state = controller.state();
    std::vector<Future<int64_t>> seeking;
    for (const MeshMember& m : controller.members())
      seeking.push_back(m.stage->seek_data(state.data_position, repair.samples_per_epoch()));
    for (Future<int64_t>& f : seeking) {
      if (absl::StatusOr<int64_t> at = std::move(f).get(kRejoinTimeout); !at.ok()) {
        return Prefixed("putting the data back: ", at.status());
      }
    }
    if (absl::Status s = controller.restore(state); !s.ok()) return s;  // the job is whole
  } else {
    if (checkpoints_ == nullptr) {
      return absl::FailedPreconditionError(
          "no surviving shard holds the lost shards' state, and the job has no checkpoint to go "
          "back to (set checkpoint.dir and checkpoint.interval_steps)");
    }
    checkpoints_->finish();  // a checkpoint in flight (the lost shards' part of it fails)
    absl::StatusOr<LoadedCheckpoint> loaded = checkpoints_->load();
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("no surviving shard holds the lost shards' state, and "
                                       "loading the latest checkpoint failed: ",
                                       loaded.status().message()));
    }
    report.checkpoint_step = loaded->step;
    report.steps_lost = step - loaded->step;
    if (absl::Status s = controller.connect_buddies(); !s.ok()) {
      return Prefixed("re-seeding the buddies' replicas: ", s);
    }
  }
  repair.mark_whole();
  report.restore_ms = now_ms() - replaced;
  report.total_ms = now_ms() - start;
  return report;
}

std::vector<LostMember> RecoveringStepper::unanswering() {
  const std::vector<MeshMember>& members = trainer_.controller().members();
  std::vector<Future<int64_t>> asking;
  for (const MeshMember& m : members)
    asking.push_back(m.shard->applied_step());
  const absl::Time answer_by = absl::Now() + kProbeTimeout;
  std::vector<LostMember> out;
  for (size_t i = 0; i < members.size(); ++i) {
    absl::StatusOr<int64_t> r =
        std::move(asking[i]).get(std::max(answer_by - absl::Now(), absl::ZeroDuration()));
    if (!r.ok()) {
      out.push_back(
          {.at = members[i].at,
           .reason = absl::StrCat("its process does not answer: ", r.status().message())});
    }
  }
  for (const LostMember& h : trainer_.controller().hung()) {
    if (std::none_of(out.begin(), out.end(), [&](const LostMember& m) { return m.at == h.at; })) {
      out.push_back(h);
    }
  }
  return out;
}

absl::Status RecoveringStepper::await_head(int64_t step, absl::Time until) {
  MeshRepair& repair = *trainer_.repair();
  std::optional<HeadAway> away = repair.head_away();
  if (!away) return absl::OkStatus();
  const std::vector<LostMember> lost = unanswering();
  if (lost.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no member of the mesh was lost (every one answers; the head at ",
                     away->address, " does not)"));
  }
  std::vector<std::string> who, names;
  for (const LostMember& m : lost) {
    names.push_back(actors::to_string(m.at));
    who.push_back(absl::StrCat(names.back(), " (", m.reason, ")"));
  }
  // Past the cluster's grace for the head its processes give up on it, the
  // survivors with what they hold: the wait ends in time for them to save a
  // last checkpoint.
  const absl::Time grace_ends = away->since + away->grace - kSaveMargin;
  const bool by_grace = grace_ends < until;
  const absl::Time give_up = std::min(until, grace_ends);
  auto waited = [](absl::Duration d) {
    return absl::StrFormat("%.0f s", absl::ToDoubleSeconds(std::max(d, absl::ZeroDuration())));
  };
  const std::string limit = absl::StrCat(
      "fault_tolerance.wait_for_node_s ", config_.wait_for_node_s, " s",
      by_grace ? absl::StrCat("; but the workers give up on the head ",
                              absl::FormatDuration(away->grace),
                              " after its last answer, and the survivors save a last checkpoint "
                              "before")
               : "");
  note(absl::StrCat("step ", step, ": lost ", absl::StrJoin(who, ", "), " while the head at ",
                    away->address, " does not answer (none for ", waited(absl::Now() - away->since),
                    "); nothing replaces ", lost.size() == 1 ? "it" : "them",
                    " until the head is back: waiting up to ", waited(give_up - absl::Now()),
                    " for it (", limit, ")"));
  const absl::Time began = absl::Now();
  absl::Time next_note = began + kNoteEvery;
  while ((away = repair.head_away()) && absl::Now() < give_up) {
    absl::SleepFor(std::min(kHeadPoll, give_up - absl::Now()));
    if (absl::Now() >= next_note && absl::Now() < give_up) {
      note(absl::StrCat("step ", step, ": still no answer from the head at ", away->address,
                        " after ", waited(absl::Now() - began), " of ", waited(give_up - began),
                        "; ", absl::StrJoin(names, ", "), " not replaced"));
      next_note += kNoteEvery;
    }
  }
  if (!away) {
    note(absl::StrCat("step ", step, ": the head answers again; replacing ",
                      absl::StrJoin(names, ", ")));
    return absl::OkStatus();
  }
  for (const LostMember& m : lost)
    unrecovered_.push_back(m.at);
  return absl::UnavailableError(
      absl::StrCat("the head at ", away->address, " did not answer within ",
                   by_grace ? absl::StrCat(waited(give_up - began), " (", limit, ")") : limit,
                   ", and without it nothing replaces ", absl::StrJoin(names, ", "),
                   " (its process does not answer)"));
}

absl::StatusOr<bool> RecoveringStepper::restore_from_replicas(const std::vector<LostMember>& lost,
                                                              RecoveryReport& report) {
  TrainerController& controller = trainer_.controller();
  const std::vector<MeshMember>& members = controller.members();
  const actors::Mesh& mesh = controller.mesh();
  std::set<int> gone;
  for (const LostMember& l : lost)
    gone.insert(actors::index_of(mesh, l.at));
  // A source for each lost shard: a survivor of the same slice and range
  // (a replica), else its buddy if that survived.
  struct Source {
    int target = 0;
    int source = 0;
    bool buddy = false;
  };
  std::vector<Source> plan;
  for (int i : gone) {
    const MeshMember& target = members[i];
    int source = -1;
    for (int j = 0; j < static_cast<int>(members.size()) && source < 0; ++j) {
      const MeshMember& m = members[j];
      if (gone.count(j) == 0 && m.at.p == target.at.p && m.at.t == target.at.t &&
          m.range.begin == target.range.begin && m.range.end == target.range.end) {
        source = j;
      }
    }
    if (source >= 0) {
      plan.push_back({.target = i, .source = source, .buddy = false});
    } else if (target.buddy >= 0 && gone.count(target.buddy) == 0) {
      plan.push_back({.target = i, .source = target.buddy, .buddy = true});
    } else {
      return false;  // primary and every copy lost
    }
  }
  // The step every surviving shard stands at.
  const int64_t committed = controller.state().next_step - 1;
  std::vector<Future<actors::ShardRestoreReport>> restoring;
  for (const Source& p : plan) {
    ShardEndpoint& target = *members[p.target].shard;
    ShardEndpoint& source = *members[p.source].shard;
    restoring.push_back(p.buddy ? target.restore_from_buddy(source, committed)
                                : target.restore_from(source));
  }
  for (size_t k = 0; k < plan.size(); ++k) {
    absl::StatusOr<actors::ShardRestoreReport> r = std::move(restoring[k]).get(kRejoinTimeout);
    const std::string who = actors::to_string(members[plan[k].target].at);
    if (!r.ok()) {
      return Prefixed(absl::StrCat("restoring ", who, ": "), r.status());
    }
    const std::string from = actors::to_string(members[plan[k].source].at);
    report.restored.push_back(
        absl::StrFormat("%s restored from %s (%s in %s)", who,
                        plan[k].buddy ? absl::StrCat("its replica on ", from) : from,
                        nn::format_bytes(r->bytes), seconds(r->restore_ms)));
  }
  // Every replica again, the replacements' and those they kept.
  if (absl::Status s = controller.connect_buddies(); !s.ok()) {
    return Prefixed("re-seeding the buddies' replicas: ", s);
  }
  return true;
}

}  // namespace troupe::trainers
