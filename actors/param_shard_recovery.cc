// ParamShardActor's recovery calls: a shard's whole state handed to a
// replacement of the same range, peer to peer (docs/fault_tolerance.md).
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/param_shard_actor.h"
#include "actors/step_clock.h"

namespace troupe::actors {

absl::StatusOr<StepProgress> ParamShardActor::progress() {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  return (*s)->progress();
}

absl::StatusOr<ShardState> ParamShardActor::export_state() {
  return export_range({.range = range_});
}

absl::StatusOr<ShardRestoreReport> ParamShardActor::import_state(ShardState state) {
  const double start = now_ms();
  if (!initialised_ && (state.range.begin != range_.begin || state.range.end != range_.end)) {
    // A replacement in a job whose partitions moved since it was spawned
    // (elasticity): it takes the partition of the state it restores, which
    // its stage holds now.
    if (absl::Status taken = take_range(state.range); !taken.ok()) return taken;
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  StageTensors& t = **s;
  if (const int64_t held = t.held_step.load(); held != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": import_state while its stage holds the gradients of step ", held,
                     " (discard it first)"));
  }
  const std::string from = absl::StrCat("the state of ", to_string(state.from));
  if (state.range.begin != range_.begin || state.range.end != range_.end) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, ": ", from, " is of parameters [", state.range.begin, ", ", state.range.end,
        "), this shard's are [", range_.begin, ", ", range_.end, ")"));
  }
  const std::vector<std::pair<std::string, float*>> states = checkpoint_state(t);
  std::vector<std::string> names;
  for (const auto& [name, where] : states)
    names.push_back(name);
  const size_t n = range_.size();
  if (state.states != names || state.data.size() != names.size() * n * sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", from, " holds ", absl::StrJoin(state.states, ", "), " in ",
                     state.data.size(), " bytes; this shard needs ", absl::StrJoin(names, ", "),
                     " in ", names.size() * n * sizeof(float)));
  }
  const auto* data = reinterpret_cast<const float*>(state.data.data());
  for (size_t k = 0; k < states.size(); ++k) {
    if (absl::Status c = nn::copy_bytes(states[k].second, device_, data + k * n, nn::Device::cpu(),
                                        static_cast<int64_t>(n * sizeof(float)));
        !c.ok()) {
      return c;
    }
  }
  if (absl::Status r = refresh_compute_copy(t); !r.ok()) return r;
  prepared_ = 0;
  applied_step_ = state.step;
  updates_ = state.updates;
  initialised_ = true;
  t.applied_step.store(applied_step_);
  t.restored_step.store(applied_step_);
  seed_buddy();
  return ShardRestoreReport{.from = state.from,
                            .step = state.step,
                            .bytes = static_cast<int64_t>(state.data.size()),
                            .restore_ms = now_ms() - start};
}

Future<ShardRestoreReport> ParamShardActor::restore_from(ActorRef<ParamShardActor> source) {
  const double start = now_ms();
  return source.call(&ParamShardActor::export_state)
      .then([this, start](ShardState state) -> absl::StatusOr<ShardRestoreReport> {
        absl::StatusOr<ShardRestoreReport> report = import_state(std::move(state));
        if (report.ok()) report->restore_ms = now_ms() - start;
        return report;
      });
}

}  // namespace troupe::actors
