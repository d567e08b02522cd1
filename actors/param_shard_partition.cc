// ParamShardActor's part of elasticity under ZeRO (docs/elasticity.md): the
// job's dp changes, and with it every rank's partition. Each shard of the
// new size first fetches the state of its new range from the shards that
// hold its parts (fetch_partition, peer to peer, nothing changed yet), and
// only once every shard has, makes it its own (adopt_partition): a part may
// be another shard's source until then.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/param_shard_actor.h"

namespace troupe::actors {

namespace {

bool contains(const nn::ParamRange& whole, const nn::ParamRange& part) {
  return part.begin <= part.end && whole.begin <= part.begin && part.end <= whole.end;
}

// The state of `range` of `like`'s kinds, as it stands after `like`'s step:
// its values left for the caller to fill.
ShardState state_like(const ShardState& like, nn::ParamRange range) {
  return ShardState{.from = like.from,
                    .step = like.step,
                    .updates = like.updates,
                    .range = range,
                    .states = like.states,
                    .data = transport::Buffer(like.states.size() * range.size() * sizeof(float))};
}

}  // namespace

absl::StatusOr<ShardState> ParamShardActor::export_range(PartitionPart part) {
  const nn::ParamRange range = part.range;
  auto outside = [&](const char* what, const nn::ParamRange& of) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": export_range [", range.begin, ", ",
                                                   range.end, ") is not a part of ", what, " [",
                                                   of.begin, ", ", of.end, ")"));
  };
  const size_t n = range.size();
  if (part.from_replica) {
    // A lost owner's part, from the replica this shard keeps of it.
    if (replica_ && replica_->state.step < part.replica_step) commit_replica(part.replica_step);
    if (!replica_ || replica_->state.step != part.replica_step) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, ": export_range of its buddy's replica at step ", part.replica_step,
          replica_ ? absl::StrCat(", but it holds one after step ", replica_->state.step)
                   : std::string(", but it holds none")));
    }
    const ShardState& r = replica_->state;
    if (!contains(r.range, range)) return outside("the replica it keeps", r.range);
    const size_t rn = r.range.size();
    ShardState out = state_like(r, range);
    auto* data = reinterpret_cast<float*>(out.data.data());
    const auto* from = reinterpret_cast<const float*>(r.data.data());
    for (size_t k = 0; k < r.states.size() && n > 0; ++k)
      std::memcpy(data + k * n, from + k * rn + (range.begin - r.range.begin), n * sizeof(float));
    return out;
  }
  if (!initialised_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": export_range, but it holds no weights (not initialised or loaded)"));
  }
  if (!contains(range_, range)) return outside("its", range_);
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  const std::vector<std::pair<std::string, float*>> states = checkpoint_state(**s);
  const size_t offset = range.begin - range_.begin;
  ShardState out{.from = options_.at,
                 .step = applied_step_,
                 .updates = updates_,
                 .range = range,
                 .states = {},
                 .data = transport::Buffer(states.size() * n * sizeof(float))};
  auto* data = reinterpret_cast<float*>(out.data.data());
  for (size_t k = 0; k < states.size(); ++k) {
    out.states.push_back(states[k].first);
    if (n == 0) continue;
    if (absl::Status c = nn::copy_bytes(data + k * n, nn::Device::cpu(), states[k].second + offset,
                                        device_, static_cast<int64_t>(n * sizeof(float)));
        !c.ok()) {
      return c;
    }
  }
  return out;
}

Future<void> ParamShardActor::fetch_partition(nn::ParamRange range,
                                              std::vector<ActorRef<ParamShardActor>> sources,
                                              std::vector<PartitionPart> parts) {
  // The parts tile the range, in order.
  bool tiles = !parts.empty() && parts.size() == sources.size();
  size_t at = range.begin;
  for (const PartitionPart& p : parts) {
    tiles = tiles && p.range.begin == at && p.range.begin <= p.range.end;
    at = p.range.end;
  }
  if (!tiles || at != range.end) {
    return Future<void>::ready_with(absl::InvalidArgumentError(
        absl::StrCat(name_, ": fetch_partition of [", range.begin, ", ", range.end, ") from ",
                     parts.size(), " parts that do not tile it (", sources.size(), " sources)")));
  }
  fetched_.reset();
  const int64_t fetch = ++fetches_;
  std::vector<Future<ShardState>> exporting;
  for (size_t i = 0; i < sources.size(); ++i)
    exporting.push_back(sources[i].call(&ParamShardActor::export_range, parts[i]));
  return when_all(std::move(exporting))
      .then([this, range, fetch](std::vector<ShardState> got) -> absl::Status {
        if (fetch != fetches_) {
          return absl::AbortedError(
              absl::StrCat(name_, ": a fetch_partition overtaken by a later one"));
        }
        const ShardState& first = got.front();
        const size_t n = range.size();
        ShardState out = state_like(first, range);
        auto* data = reinterpret_cast<float*>(out.data.data());
        for (const ShardState& part : got) {
          if (part.step != first.step || part.states != first.states) {
            return absl::FailedPreconditionError(absl::StrCat(
                name_, ": the parts of its new partition are at different steps (", first.step,
                " from ", to_string(first.from), ", ", part.step, " from ", to_string(part.from),
                ") or hold other states (", absl::StrJoin(part.states, ", "), ")"));
          }
          const size_t pn = part.range.size();
          const auto* from = reinterpret_cast<const float*>(part.data.data());
          for (size_t k = 0; k < out.states.size() && pn > 0; ++k) {
            std::memcpy(data + k * n + (part.range.begin - range.begin), from + k * pn,
                        pn * sizeof(float));
          }
        }
        fetched_ = std::move(out);
        return absl::OkStatus();
      });
}

absl::StatusOr<ShardRestoreReport> ParamShardActor::adopt_partition() {
  if (!fetched_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": adopt_partition without a fetched partition (fetch_partition)"));
  }
  ShardState state = *std::move(fetched_);
  fetched_.reset();
  // Its buddy and what it keeps belong to the old mesh: the new one sets
  // them again (no seed of this state goes to the old buddy).
  buddy_.reset();
  buddy_seed_ = std::make_shared<SeedState>(SeedState::kNone);
  replica_.reset();
  if (absl::Status s = take_range(state.range); !s.ok()) return s;
  return import_state(std::move(state));
}

}  // namespace troupe::actors
