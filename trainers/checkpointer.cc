#include "trainers/checkpointer.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/step_clock.h"
#include "actors/zero_partition.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checksum.h"

namespace troupe::trainers {
namespace {

// A shard's save or load of a large model may take a while on a slow disk.
constexpr absl::Duration kIoTimeout = absl::Hours(1);

io::Env* env() {
  return io::Env::posix();
}

// The config as far as it decides the run's trajectory: without how long it
// runs, what it prints and where it writes.
uint64_t trajectory_hash(const std::string& config_json) {
  nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_object()) {
    j.erase("checkpoint");
    j.erase("fault_tolerance");
    if (j.contains("training") && j["training"].is_object()) {
      for (const char* key :
           {"steps", "log_interval", "metrics_file", "tensorboard_dir", "report_metrics",
            "output_dir", "eval_interval", "eval_samples", "threads"}) {
        j["training"].erase(key);
      }
    }
  }
  const std::string text = j.dump();
  return checkpoint::xxh64(text.data(), text.size());
}

}  // namespace

JobRecord job_record(const TrainConfig& config, int64_t samples_per_epoch) {
  JobRecord job;
  job.model = config.model;
  job.model = config.model.normalized();
  job.layout = {.dp = config.parallel.dp,
                .pp = config.parallel.pp,
                .tp = config.parallel.tp,
                .zero_stage = config.zero.stage,
                .virtual_stages = config.parallel.virtual_stages};
  job.optimizer = config.optimizer.type == OptimizerType::kAdamW ? "adamw" : "sgd";
  job.rng = {.seed = config.training.seed,
             .task_seed = config.data.synthetic ? config.data.synthetic->seed : 0};
  job.samples_per_epoch = samples_per_epoch;
  job.config_json = to_json(config);
  return job;
}

Checkpointer::Checkpointer(TrainerController& controller, JobRecord job, CheckpointConfig config)
    : controller_(controller), job_(std::move(job)), config_(std::move(config)) {}

Checkpointer::~Checkpointer() {
  // The shards finish their writes on their own; only the manifest is not
  // written for a checkpoint still in flight, so it is not complete.
  join_pruner();
}

absl::Status Checkpointer::mark_best(int64_t step) {
  return checkpoint::mark_best_checkpoint(env(), config_.dir, step);
}

void Checkpointer::join_pruner() {
  if (pruner_.joinable()) pruner_.join();
}

absl::Status Checkpointer::start(int64_t step, const std::vector<actors::Coordinate>& lost) {
  const std::vector<nn::ParamRange>& owned = controller_.owned();
  const std::vector<MeshMember>& members = controller_.members();
  if (owned.size() != members.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of step ", step, ": no step has run yet"));
  }
  auto is_lost = [&](const actors::Coordinate& at) {
    return std::find(lost.begin(), lost.end(), at) != lost.end();
  };
  for (const actors::Coordinate& at : controller_.lost_shards()) {
    if (!is_lost(at)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint of step ", step, ": the job lost shards; they must be restored first"));
    }
  }
  Pending p;
  p.step = step;
  p.step_dir = checkpoint::step_dir(config_.dir, step);
  p.state = controller_.state();
  p.mesh = controller_.mesh();
  p.start_ms = actors::now_ms();
  // The pipeline stages' ranges of a slice's buffer, in order (one stage:
  // the whole buffer).
  if (p.mesh.pp > 1) {
    for (int stage = 0; stage < p.mesh.pp; ++stage) {
      const auto at = static_cast<size_t>(actors::index_of(p.mesh, {.d = 0, .p = stage, .t = 0}));
      p.stages.push_back(members[at].range);
    }
  }
  // Each distinct range of a slice saved once: the members that hold the
  // same range (DDP's replicas) each save a part of it, split as ZeRO
  // partitions are. A range only lost members held is saved by a buddy from
  // its replica.
  std::vector<std::pair<int, nn::ParamRange>> ranges;  // (slice, range)
  std::vector<std::vector<int>> holders;               // the survivors holding each range
  std::vector<int> kept;  // else a lost holder whose buddy, alive, keeps its replica (-1: none)
  for (size_t i = 0; i < members.size(); ++i) {
    if (owned[i].size() == 0) continue;
    const std::pair<int, nn::ParamRange> key(members[i].at.t, owned[i]);
    auto it = std::find(ranges.begin(), ranges.end(), key);
    if (it == ranges.end()) {
      ranges.push_back(key);
      holders.emplace_back();
      kept.push_back(-1);
      it = ranges.end() - 1;
    }
    const auto r = static_cast<size_t>(it - ranges.begin());
    if (!is_lost(members[i].at)) {
      holders[r].push_back(static_cast<int>(i));
    } else if (const int buddy = members[i].buddy;
               buddy >= 0 && !is_lost(members[static_cast<size_t>(buddy)].at)) {
      kept[r] = static_cast<int>(i);
    }
  }
  for (size_t r = 0; r < ranges.size(); ++r) {
    const int k = static_cast<int>(holders[r].size());
    if (k == 0 && kept[r] < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint of step ", step, ": no surviving shard holds parameters [",
                       ranges[r].second.begin, ", ", ranges[r].second.end, ") of slice ",
                       ranges[r].first, ", nor a replica of them"));
    }
    if (k == 0) {
      const MeshMember& owner = members[static_cast<size_t>(kept[r])];
      p.writers.push_back(owner.buddy);
      p.parts.push_back(ranges[r].second);
      p.replicas.push_back(true);
      p.owners.push_back(owner.at);
    }
    for (int j = 0; j < k; ++j) {
      const nn::ParamRange part = actors::ZeroPartition(ranges[r].second, k, j).own();
      if (part.size() == 0) continue;
      p.writers.push_back(holders[r][static_cast<size_t>(j)]);
      p.parts.push_back(part);
      p.replicas.push_back(false);
      p.owners.push_back(members[static_cast<size_t>(holders[r][static_cast<size_t>(j)])].at);
    }
  }
  if (absl::Status s = checkpoint::begin_checkpoint(env(), config_.dir, step); !s.ok()) return s;
  for (size_t w = 0; w < p.writers.size(); ++w) {
    ShardEndpoint& writer = *members[static_cast<size_t>(p.writers[w])].shard;
    const actors::SaveRequest request{
        .step_dir = p.step_dir, .step = step, .range = p.parts[w], .owner = p.owners[w]};
    p.reports.push_back(p.replicas[w] ? writer.save_replica(request) : writer.save(request));
  }
  pending_ = std::move(p);
  return absl::OkStatus();
}

CheckpointEvent Checkpointer::complete() {
  const double called = actors::now_ms();
  Pending p = *std::move(pending_);
  pending_.reset();
  CheckpointEvent event{.step = p.step, .status = absl::OkStatus(), .step_dir = p.step_dir};
  checkpoint::Manifest m;
  bool all_back = true;  // no owner is still writing into the step's directory
  for (size_t k = 0; k < p.reports.size(); ++k) {
    absl::StatusOr<actors::ShardSaveReport> r = std::move(p.reports[k]).get(kIoTimeout);
    if (!r.ok()) {
      all_back = all_back && !absl::IsDeadlineExceeded(r.status());
      event.status.Update(r.status());
      continue;
    }
    event.bytes += r->bytes;
    event.staging_ms = std::max(event.staging_ms, r->staging_ms);
    event.write_ms = std::max(event.write_ms, r->write_ms);
    const actors::Coordinate& at = r->owner;
    checkpoint::ShardRecord record{.file = r->file,
                                   .owner = {.d = at.d, .p = at.p, .t = at.t},
                                   .begin = static_cast<int64_t>(r->range.begin),
                                   .end = static_cast<int64_t>(r->range.end),
                                   .entries = {}};
    for (const actors::SavedEntry& e : r->entries) {
      record.entries.push_back(
          {.state = e.state, .offset = e.offset, .length = e.length, .xxh64 = e.xxh64});
    }
    m.shards.push_back(std::move(record));
  }
  // A failed save leaves no directory behind (the files the other owners
  // wrote, or an empty one): failed saves on a full disk do not pile up. One
  // whose manifest was written is complete, and stays (abandon_checkpoint);
  // one an owner may still be writing into is left to pruning.
  auto abandon_if_failed = [&] {
    if (!event.status.ok() && all_back)
      checkpoint::abandon_checkpoint(env(), config_.dir, p.step).IgnoreError();  // best effort
  };
  if (!event.status.ok()) {
    abandon_if_failed();
    event.total_ms = actors::now_ms() - p.start_ms;
    event.waited_ms = actors::now_ms() - called;
    return event;
  }
  m.step = p.step;
  m.applied_steps = p.state.applied;
  m.model = job_.model;
  m.layout = job_.layout;
  m.layout.dp = p.mesh.dp;
  m.layout.pp = p.mesh.pp;
  m.layout.tp = p.mesh.tp;
  m.tensors = checkpoint::tensor_records(job_.model, p.mesh.tp, p.stages);
  m.optimizer = {.type = job_.optimizer, .updates = p.state.applied};
  m.data = {.position = p.state.data_position,
            .epoch = p.state.epoch,
            .samples_per_epoch = job_.samples_per_epoch};
  m.rng = job_.rng;
  m.loss_scaler = p.state.loss_scaler;
  m.config_hash = trajectory_hash(job_.config_json);
  m.config = job_.config_json;
  m.tokenizer = job_.tokenizer;
  m.created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  // What loading will check, checked before it is made latest.
  absl::StatusOr<checkpoint::Manifest> back = checkpoint::decode_manifest(
      checkpoint::encode_manifest(m), checkpoint::step_dir_name(p.step));
  if (!back.ok()) {
    event.status = absl::InternalError(absl::StrCat(
        "the manifest the shards' reports make is not loadable: ", back.status().message()));
  } else {
    event.status = checkpoint::commit_checkpoint(env(), config_.dir, m, /*keep=*/0);
  }
  abandon_if_failed();
  event.total_ms = actors::now_ms() - p.start_ms;
  event.waited_ms = actors::now_ms() - called;
  // Removing old checkpoints can take a while (large files, a file system
  // that discards freed blocks); it is not the new checkpoint's business, and
  // not the training's: a thread of its own does it.
  if (event.status.ok()) {
    join_pruner();
    pruner_ = std::thread([dir = config_.dir, newest = p.step, keep = config_.keep] {
      checkpoint::prune_checkpoints(env(), dir, newest, keep).IgnoreError();  // best effort
    });
  }
  return event;
}

bool Checkpointer::start_or_report(int64_t step, std::vector<CheckpointEvent>& events,
                                   const std::vector<actors::Coordinate>& lost) {
  absl::Status s = start(step, lost);
  if (s.ok()) return true;
  events.push_back(
      {.step = step, .status = s, .step_dir = checkpoint::step_dir(config_.dir, step)});
  return false;
}

std::vector<CheckpointEvent> Checkpointer::after_step(int64_t step) {
  std::vector<CheckpointEvent> events;
  if (pending_ && std::all_of(pending_->reports.begin(), pending_->reports.end(),
                              [](const auto& f) { return f.ready(); })) {
    events.push_back(complete());
  }
  if (config_.interval_steps <= 0 || step % config_.interval_steps != 0) return events;
  if (pending_) events.push_back(complete());
  if (start_or_report(step, events) && !config_.async) events.push_back(complete());
  return events;
}

std::vector<CheckpointEvent> Checkpointer::save_now(const std::vector<actors::Coordinate>& lost) {
  const int64_t step = controller_.next_step() - 1;
  std::vector<CheckpointEvent> events = finish();
  if (start_or_report(step, events, lost)) events.push_back(complete());
  return events;
}

std::vector<CheckpointEvent> Checkpointer::finish() {
  std::vector<CheckpointEvent> events;
  if (pending_) events.push_back(complete());
  join_pruner();
  return events;
}

absl::StatusOr<LoadedCheckpoint> Checkpointer::load_from(const std::string& step_dir,
                                                         const checkpoint::Manifest& m) {
  if (m.model != job_.model) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint::step_dir_name(m.step), " is of another model (",
                     m.model.describe(), ") than the config's (", job_.model.describe(), ")"));
  }
  if (m.optimizer.type != job_.optimizer) {
    return absl::InvalidArgumentError(absl::StrCat(checkpoint::step_dir_name(m.step),
                                                   " was saved with optimizer ", m.optimizer.type,
                                                   "; the config's is ", job_.optimizer));
  }
  const double start = actors::now_ms();
  const std::vector<MeshMember>& members = controller_.members();
  std::vector<Future<actors::ShardLoadReport>> loading;
  for (const MeshMember& member : members)
    loading.push_back(member.shard->load({.step_dir = step_dir, .range = member.range}));
  LoadedCheckpoint loaded{.step = m.step, .step_dir = step_dir, .saved_layout = m.layout};
  absl::Status first;
  for (auto& f : loading) {
    absl::StatusOr<actors::ShardLoadReport> r = std::move(f).get(kIoTimeout);
    if (!r.ok()) {
      // A corrupt file decides: the caller falls back.
      if (first.ok() || (absl::IsDataLoss(r.status()) && !absl::IsDataLoss(first)))
        first = r.status();
      continue;
    }
    if (r->step != m.step) {
      first.Update(absl::InternalError(
          absl::StrCat("a shard loaded step ", r->step, " of a checkpoint of step ", m.step)));
    }
    loaded.bytes += r->bytes;
  }
  if (!first.ok()) return first;
  std::vector<Future<int64_t>> seeking;
  for (const MeshMember& member : members)
    seeking.push_back(member.stage->seek_data(m.data.position, m.data.samples_per_epoch));
  for (auto& f : seeking) {
    absl::StatusOr<int64_t> position = std::move(f).get(kIoTimeout);
    if (!position.ok()) return position.status();
    loaded.data_position = *position;
  }
  if (absl::Status s = controller_.restore({.next_step = m.step + 1,
                                            .applied = m.applied_steps,
                                            .loss_scaler = m.loss_scaler,
                                            .data_position = loaded.data_position,
                                            .epoch = m.data.epoch});
      !s.ok()) {
    return s;
  }
  loaded.config_changed = m.config_hash != trajectory_hash(job_.config_json);
  loaded.load_ms = actors::now_ms() - start;
  return loaded;
}

absl::StatusOr<LoadedCheckpoint> Checkpointer::load(std::optional<int64_t> step) {
  if (config_.dir.empty()) {
    return absl::InvalidArgumentError("checkpoint.dir is not set: nothing to resume from");
  }
  absl::StatusOr<checkpoint::FoundCheckpoint> found =
      checkpoint::find_checkpoint(env(), config_.dir, step);
  if (!found.ok()) return found.status();
  std::vector<std::string> skipped = found->skipped;
  for (;;) {
    absl::StatusOr<LoadedCheckpoint> loaded = load_from(found->step_dir, found->manifest);
    if (loaded.ok()) {
      for (std::string& line : skipped)
        absl::StrAppend(&line, "; falling back to ", checkpoint::step_dir_name(loaded->step));
      loaded->skipped = std::move(skipped);
      return loaded;
    }
    if (!absl::IsDataLoss(loaded.status()) || step) return loaded.status();
    // The shards found a file corrupt: the checkpoint before it.
    const std::string name = checkpoint::step_dir_name(found->manifest.step);
    std::string why(loaded.status().message());
    if (const size_t at = why.find(name); at != std::string::npos) {
      why = why.substr(at);  // from "step-N: FILE ...", without the shard's name
    } else {
      why = absl::StrCat(name, ": ", why);
    }
    skipped.push_back(why);
    const int64_t below = found->manifest.step;
    // When none older loads either, the error names every checkpoint tried,
    // each with its own reason (the newest first).
    found = checkpoint::find_checkpoint(env(), config_.dir, std::nullopt, below, skipped);
    if (!found.ok()) {
      if (absl::StrContains(found.status().message(), why)) return found.status();
      return absl::Status(found.status().code(),
                          absl::StrCat(found.status().message(), " (after passing over ",
                                       absl::StrJoin(skipped, "; "), ")"));
    }
    skipped = found->skipped;
  }
}

}  // namespace troupe::trainers
