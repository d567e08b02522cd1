#include "actors/param_shard_actor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actors/failpoint.h"
#include "actors/handoff.h"
#include "actors/step_clock.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/pretrained.h"
#include "checkpoint/shard_file.h"
#include "core/status.h"
#include "nn/model/model.h"
#include "nn/optim/clip.h"

namespace troupe::actors {

absl::StatusOr<std::unique_ptr<ParamShardActor>> ParamShardActor::create(
    const ShardOptions& options) {
  if (absl::Status s = options.model.validate(); !s.ok()) return s;
  const nn::TensorSlice slice{.rank = options.at.t, .size = options.tp};
  if (absl::Status s = nn::validate_slice(options.model, slice); !s.ok()) {
    return Prefixed(absl::StrCat("parameter shard ", to_string(options.at), ": "), s);
  }
  nn::ModelLayout layout = nn::model_layout(options.model, slice);
  nn::ParamRange range = options.range;
  if (range.begin == 0 && range.end == 0) range.end = layout.num_params();
  if (range.begin > range.end || range.end > layout.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter shard ", to_string(options.at), ": range [", range.begin, ", ", range.end,
        ") does not lie inside the model's ", layout.num_params(), " parameters"));
  }
  if (options.precision != nn::DType::kFloat32 && options.precision != nn::DType::kBFloat16 &&
      options.precision != nn::DType::kFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter shard ", to_string(options.at), ": precision ",
                     static_cast<int>(options.precision), " is not fp32, fp16 or bf16"));
  }
  std::unique_ptr<ParamShardActor> shard(new ParamShardActor(options, layout, range));
  // The state lives on its stage's device (spawned before it, in the same process).
  if (std::shared_ptr<StageTensors> t =
          Handoff::find<StageTensors>(actor_name(options.job, "stage", options.at));
      t != nullptr) {
    shard->device_ = t->device;
  }
  absl::StatusOr<nn::DeviceBackend*> backend = nn::backend(shard->device_.kind);
  if (!backend.ok()) return Prefixed(absl::StrCat(shard->name_, ": "), backend.status());
  shard->backend_ = *backend;
  if (absl::Status s = shard->allocate_state(); !s.ok()) return s;
  return shard;
}

ParamShardActor::ParamShardActor(ShardOptions options, nn::ModelLayout layout, nn::ParamRange range)
    : options_(std::move(options)),
      name_(actor_name(options_.job, "shard", options_.at)),
      layout_(std::move(layout)),
      range_(range) {
  const std::vector<nn::ParamRange> model_no_decay = layout_.no_decay_ranges();
  no_decay_ = nn::ranges_in_shard(model_no_decay, range_.begin, range_.size());
}

absl::Status ParamShardActor::allocate_state() {
  const size_t n = range_.size();
  constexpr nn::MemoryCategory kState = nn::MemoryCategory::kOptimizerState;
  if (options_.precision != nn::DType::kFloat32) {
    if (absl::Status s = master_.reset(kState, n, true, device_); !s.ok()) return s;
  }
  if (absl::Status s = m_.reset(kState, n, true, device_); !s.ok()) return s;
  if (options_.optimizer.kind == OptimizerSpec::kAdamW) {
    if (absl::Status s = v_.reset(kState, n, true, device_); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParamShardActor::take_range(nn::ParamRange range) {
  if (range == range_) return absl::OkStatus();
  range_ = range;
  no_decay_ = nn::ranges_in_shard(layout_.no_decay_ranges(), range_.begin, range_.size());
  return allocate_state();
}

absl::StatusOr<std::shared_ptr<StageTensors>> ParamShardActor::stage() {
  std::string stage_name = actor_name(options_.job, "stage", options_.at);
  std::shared_ptr<StageTensors> tensors = Handoff::find<StageTensors>(stage_name);
  if (tensors == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": its stage ", stage_name, " is not in this process"));
  }
  if (tensors->device != device_) {
    // Made before its stage (a restart may bring them back in either order): its state, which
    // holds nothing yet, moves to the stage's device. Holding weights, it cannot.
    if (initialised_) {
      return absl::FailedPreconditionError(absl::StrCat(name_, ": its state is on ",
                                                        nn::to_string(device_), ", its stage on ",
                                                        nn::to_string(tensors->device)));
    }
    absl::StatusOr<nn::DeviceBackend*> backend = nn::backend(tensors->device.kind);
    if (!backend.ok()) return Prefixed(absl::StrCat(name_, ": "), backend.status());
    device_ = tensors->device;
    backend_ = *backend;
    if (absl::Status s = allocate_state(); !s.ok()) return s;
  }
  if (tensors->n != layout_.num_params()) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": the stage has ", tensors->n, " parameters, the model ", layout_.num_params()));
  }
  auto holds = [&](const nn::ParamRange& held) {
    return held.begin <= range_.begin && range_.end <= held.end;
  };
  if (!holds(tensors->params_held) || !holds(tensors->grads_held)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": the stage holds parameters [", tensors->params_held.begin, ", ",
                     tensors->params_held.end, ") and gradients [", tensors->grads_held.begin, ", ",
                     tensors->grads_held.end, "), not all of the shard's [", range_.begin, ", ",
                     range_.end, ")"));
  }
  tensors->optimizer_bytes.store(static_cast<int64_t>(master_.bytes() + m_.bytes() + v_.bytes()));
  return tensors;
}

float* ParamShardActor::stage_params(StageTensors& stage) const {
  return stage.params + (range_.begin - stage.params_held.begin);
}

float* ParamShardActor::stage_grads(StageTensors& stage) const {
  return stage.grads + (range_.begin - stage.grads_held.begin);
}

float* ParamShardActor::masters(StageTensors& stage) {
  return master_.data() == nullptr ? stage_params(stage) : master_.data();
}

absl::Status ParamShardActor::refresh_compute_copy(StageTensors& stage) {
  stage.params_version.fetch_add(1);
  if (master_.data() == nullptr) return absl::OkStatus();  // fp32: the stage computes with them
  // Round each master to the compute type and back: the stage's kernels read
  // fp32, holding exactly the values a bf16 / fp16 copy holds.
  return backend_->round_to(device_.index, stage_params(stage), master_.data(), master_.size(),
                            options_.precision);
}

absl::Status ParamShardActor::write_masters(StageTensors& stage, const float* host) {
  return nn::copy_bytes(masters(stage), device_, host, nn::Device::cpu(),
                        static_cast<int64_t>(range_.size() * sizeof(float)));
}

absl::StatusOr<int64_t> ParamShardActor::init() {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  // The range's weights, made on the host (only the range, without the memory of a whole model)
  // and written to the masters wherever they live.
  std::vector<float> weights(device_.is_cpu() ? 0 : range_.size());
  float* out = device_.is_cpu() ? masters(**s) : weights.data();
  if (!options_.init_from.empty()) {
    if (absl::Status loaded = load_pretrained(out); !loaded.ok()) return loaded;
  } else {
    nn::init_parameters(options_.model, layout_.slice(), options_.seed, range_.begin, range_.end,
                        out);
  }
  if (!device_.is_cpu()) {
    if (absl::Status written = write_masters(**s, out); !written.ok()) return written;
  }
  if (absl::Status r = refresh_compute_copy(**s); !r.ok()) return r;
  if (absl::Status c = clear_state(); !c.ok()) return c;
  prepared_ = 0;
  applied_step_ = 0;
  updates_ = 0;
  initialised_ = true;
  (*s)->applied_step.store(0);
  seed_buddy();
  return static_cast<int64_t>(range_.size());
}

absl::Status ParamShardActor::load_pretrained(float* out) {
  absl::StatusOr<std::vector<float>> whole =
      checkpoint::load_pretrained(io::Env::posix(), options_.init_from, options_.model);
  if (!whole.ok()) return Prefixed(absl::StrCat(name_, ": "), whole.status());
  // The slice's layout of the whole model, then the shard's range of it.
  std::vector<float> slice(layout_.num_params());
  nn::copy_to_slice(nn::model_layout(options_.model), layout_, whole->data(), slice.data());
  std::copy(slice.begin() + static_cast<std::ptrdiff_t>(range_.begin),
            slice.begin() + static_cast<std::ptrdiff_t>(range_.end), out);
  return absl::OkStatus();
}

absl::Status ParamShardActor::clear_state() {
  for (nn::FloatBuffer* b : {&m_, &v_}) {
    if (b->size() == 0) continue;
    if (absl::Status s = nn::zero_bytes(b->data(), device_, static_cast<int64_t>(b->bytes()));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ParamShardActor::prepare(int64_t step) {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  if (!initialised_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": prepare of step ", step,
                     ", but it holds no weights (not initialised or loaded; restarted?)"));
  }
  if (const int64_t stage_at = (*s)->applied_step.load(); stage_at != applied_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": prepare of step ", step, ", but the shard is at step ", applied_step_,
        " and its stage's parameters at step ", stage_at, " (restarted? restore it first)"));
  }
  if (step <= applied_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": prepare of step ", step, ", but step ", applied_step_, " is already applied"));
  }
  const int64_t held = (*s)->held_step.load();
  if (held != step) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": prepare of step ", step, ", but its stage holds ",
                     held == 0 ? std::string("no step's gradients")
                               : absl::StrCat("the gradients of step ", held)));
  }
  prepared_ = step;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParamShardActor::commit(CommitRequest request) {
  if (request.step == applied_step_ && applied_step_ > 0) return applied_step_;  // a retry
  if (request.step != prepared_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": commit of step ", request.step, ", but ",
                     prepared_ == 0 ? std::string("no step is prepared")
                                    : absl::StrCat("step ", prepared_, " is the one prepared"),
                     " (the last applied is ", applied_step_, ")"));
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  StageTensors& t = **s;
  if (const int64_t held = t.held_step.load(); held != request.step) {
    return absl::FailedPreconditionError(absl::StrCat(name_, ": commit of step ", request.step,
                                                      ", but its stage's gradients (step ", held,
                                                      ") were dropped after prepare"));
  }
  failpoint("commit", options_.at, request.step);     // past the commit point
  const int update = static_cast<int>(updates_ + 1);  // AdamW's bias correction counts updates
  const absl::Time update_began = absl::Now();
  absl::Status applied =
      apply_update(*backend_, device_.index, request, update, masters(t), stage_grads(t), m_.data(),
                   v_.data(), range_.size(), no_decay_);
  if (applied.ok()) applied = refresh_compute_copy(t);
  if (!applied.ok())
    return Prefixed(absl::StrCat(name_, ": commit of step ", request.step, ": "), applied);
  updates_ = update;
  applied_step_ = request.step;
  prepared_ = 0;
  t.update_us.store(absl::ToInt64Microseconds(absl::Now() - update_began));
  t.applied_step.store(applied_step_);
  t.held_step.store(0);
  // The buddy holds the step's update (replicate): it applies it now.
  if (buddy_) buddy_->tell(&ParamShardActor::commit_replica, applied_step_);
  return applied_step_;
}

absl::Status ParamShardActor::apply_update(nn::DeviceBackend& backend, int device,
                                           const CommitRequest& commit, int update, float* p,
                                           float* grads, float* m, float* v, size_t n,
                                           const std::vector<nn::ParamRange>& no_decay) const {
  if (commit.grad_scale != 1.0f) {
    if (absl::Status s = backend.scale(device, grads, n, commit.grad_scale); !s.ok()) return s;
  }
  if (options_.optimizer.kind == OptimizerSpec::kAdamW) {
    return backend.adamw_update(device, {.params = p,
                                         .grads = grads,
                                         .m = m,
                                         .v = v,
                                         .n = n,
                                         .config = options_.optimizer.adamw(commit.lr),
                                         .lr = commit.lr,
                                         .step = update,
                                         .no_decay = no_decay});
  }
  return backend.sgd_update(device,
                            {.params = p,
                             .grads = grads,
                             .momentum_buffer = options_.optimizer.momentum > 0 ? m : nullptr,
                             .n = n,
                             .config = options_.optimizer.sgd(commit.lr),
                             .lr = commit.lr,
                             .step = update});
}

absl::StatusOr<std::vector<float>> ParamShardActor::master_params() {
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  std::vector<float> out(range_.size());
  if (absl::Status c = nn::copy_bytes(out.data(), nn::Device::cpu(), masters(**s), device_,
                                      static_cast<int64_t>(out.size() * sizeof(float)));
      !c.ok()) {
    return c;
  }
  return out;
}

absl::Status ParamShardActor::load_params(std::vector<float> params) {
  if (params.size() != range_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": load_params of ", params.size(),
                                                   " values for a shard of ", range_.size(),
                                                   " parameters"));
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  if (absl::Status w = write_masters(**s, params.data()); !w.ok()) return w;
  if (absl::Status r = refresh_compute_copy(**s); !r.ok()) return r;
  if (absl::Status c = clear_state(); !c.ok()) return c;
  updates_ = 0;
  initialised_ = true;
  seed_buddy();
  return absl::OkStatus();
}

}  // namespace troupe::actors

namespace troupe::actors {

ParamShardActor::~ParamShardActor() {
  if (writer_.joinable()) writer_.join();
}

std::vector<std::pair<std::string, float*>> ParamShardActor::checkpoint_state(StageTensors& stage) {
  std::vector<std::pair<std::string, float*>> states = {{checkpoint::kParamState, masters(stage)}};
  if (options_.optimizer.kind == OptimizerSpec::kAdamW) {
    states.emplace_back(checkpoint::kExpAvgState, m_.data());
    states.emplace_back(checkpoint::kExpAvgSqState, v_.data());
  } else if (options_.optimizer.momentum > 0) {
    states.emplace_back(checkpoint::kMomentumState, m_.data());
  }
  return states;
}

Future<ShardSaveReport> ParamShardActor::save(SaveRequest request) {
  auto refuse = [&](const std::string& why) {
    return Future<ShardSaveReport>::ready_with(absl::FailedPreconditionError(
        absl::StrCat(name_, ": save of step ", request.step, ": ", why)));
  };
  if (writing_.load()) return refuse("the previous save is still being written");
  if (!initialised_) return refuse("it holds no weights (not initialised or loaded)");
  if (prepared_ != 0) {
    // A prepare is void once its stage dropped the step's gradients (the
    // step was discarded: a rank was lost between prepare and commit, and
    // the survivors save the step before as the job's last checkpoint).
    absl::StatusOr<std::shared_ptr<StageTensors>> held = stage();
    if (!held.ok() || (*held)->held_step.load() == prepared_) {
      return refuse(absl::StrCat("step ", prepared_, " is prepared, not committed"));
    }
    prepared_ = 0;
  }
  if (request.step < applied_step_) {
    return refuse(absl::StrCat("it has applied step ", applied_step_, " already"));
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return Future<ShardSaveReport>::ready_with(s.status());
  if (writer_.joinable()) writer_.join();  // done (writing_ is false)

  nn::ParamRange part = request.range;
  if (part.begin == 0 && part.end == 0) part = range_;
  if (part.begin < range_.begin || part.end > range_.end || part.begin > part.end) {
    return refuse(absl::StrCat("[", part.begin, ", ", part.end, ") is not a part of its range [",
                               range_.begin, ", ", range_.end, ")"));
  }
  // The step boundary's share is one copy of the state into the staging
  // buffer; the writer starts at once and writes each piece as soon as it is
  // copied (the buffer holds the file's bytes in file order).
  const size_t n = part.size();
  const size_t skip = part.begin - range_.begin;
  const std::vector<std::pair<std::string, float*>> states = checkpoint_state(**s);
  staging_.resize(states.size() * n);
  std::vector<checkpoint::StateArray> arrays;
  for (size_t k = 0; k < states.size(); ++k)
    arrays.push_back({.state = states[k].first, .data = staging_.data() + k * n, .n = n});
  ShardSaveReport report;
  const Coordinate& owner = request.owner;
  report.file = checkpoint::shard_file_name({.d = owner.d, .p = owner.p, .t = owner.t});
  report.owner = owner;
  report.range = part;
  report.bytes = static_cast<int64_t>(staging_.size() * sizeof(float));

  Promise<ShardSaveReport> done;
  Future<ShardSaveReport> future = done.get_future();
  staged_.store(0);
  writing_.store(true);
  writer_ =
      std::thread([this, dir = request.step_dir, step = request.step, arrays = std::move(arrays),
                   report = std::move(report), done = std::move(done)]() mutable {
        const double t0 = now_ms();
        auto await_staged = [this, total = report.bytes, step](uint64_t bytes) {
          if (2 * bytes >= static_cast<uint64_t>(total)) failpoint("checkpoint", options_.at, step);
          for (uint64_t have = staged_.load(); have < bytes; have = staged_.load())
            staged_.wait(have);
        };
        absl::StatusOr<std::vector<checkpoint::ShardEntry>> entries =
            checkpoint::write_shard_file(io::Env::posix(), dir, report.file, arrays, await_staged);
        report.write_ms = now_ms() - t0;
        await_staged(static_cast<uint64_t>(report.bytes));  // then staging_ms_ is the copy's
        report.staging_ms = staging_ms_.load();
        writing_.store(false);
        if (!entries.ok()) {
          done.set_error(absl::Status(
              entries.status().code(),
              absl::StrCat(name_, ": writing ", report.file, ": ", entries.status().message())));
          return;
        }
        for (const checkpoint::ShardEntry& e : *entries) {
          report.entries.push_back(
              {.state = e.state, .offset = e.offset, .length = e.length, .xxh64 = e.xxh64});
        }
        done.set_value(std::move(report));
      });
  const double start = now_ms();
  constexpr size_t kPiece = (size_t{4} << 20) / sizeof(float);  // the writer's 4 MiB pieces
  uint64_t copied = 0;
  absl::Status staging_error;
  for (size_t k = 0; k < states.size(); ++k) {
    for (size_t at = 0; at < n; at += kPiece) {
      const size_t len = std::min(kPiece, n - at);
      if (absl::Status c = nn::copy_bytes(staging_.data() + k * n + at, nn::Device::cpu(),
                                          states[k].second + skip + at, device_,
                                          static_cast<int64_t>(len * sizeof(float)));
          !c.ok()) {
        staging_error = c;
      }
      copied += len * sizeof(float);
      if (copied < staging_.size() * sizeof(float)) {
        staged_.store(copied);
        staged_.notify_all();
      }
    }
  }
  staging_ms_.store(now_ms() - start);
  staged_.store(staging_.size() * sizeof(float));  // after staging_ms_: the writer reads it
  staged_.notify_all();
  if (!staging_error.ok()) {
    // The file holds what the copy left: wait for the writer, and fail the save instead.
    writer_.join();
    return Future<ShardSaveReport>::ready_with(
        Prefixed(absl::StrCat(name_, ": save of step ", request.step, ": copying the state: "),
                 staging_error));
  }
  return future;
}

absl::StatusOr<ShardLoadReport> ParamShardActor::load(LoadRequest request) {
  const double start = now_ms();
  if (!(request.range == range_)) {
    if (initialised_) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": load of parameters [", request.range.begin, ", ",
                       request.range.end, "), but it owns [", range_.begin, ", ", range_.end, ")"));
    }
    // A replacement in a job whose partitions moved since it was spawned.
    if (absl::Status taken = take_range(request.range); !taken.ok()) return taken;
  }
  absl::StatusOr<std::shared_ptr<StageTensors>> s = stage();
  if (!s.ok()) return s.status();
  StageTensors& t = **s;
  if (const int64_t held = t.held_step.load(); held != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": load while its stage holds the gradients of step ", held, " (discard it first)"));
  }
  io::Env* env = io::Env::posix();
  const std::string manifest_path = request.step_dir + "/" + checkpoint::kManifestFile;
  absl::StatusOr<std::string> text = env->read_file(manifest_path, checkpoint::kMaxManifestBytes);
  if (!text.ok()) {
    const absl::Status& e = text.status();
    // Missing or oversized is the checkpoint's fault; another I/O error is not.
    const absl::StatusCode code =
        absl::IsNotFound(e) || absl::IsDataLoss(e) ? absl::StatusCode::kDataLoss : e.code();
    return absl::Status(code, absl::StrCat(name_, ": ", e.message()));
  }
  absl::StatusOr<checkpoint::Manifest> m = checkpoint::decode_manifest(*text, manifest_path);
  if (!m.ok()) return m.status();
  const nn::ModelConfig& want = options_.model;
  const nn::ModelConfig& have = m->model;
  if (have != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, ": ", manifest_path, " is of another model (", have.describe(), ")"));
  }
  const char* optimizer = options_.optimizer.kind == OptimizerSpec::kAdamW ? "adamw" : "sgd";
  if (m->optimizer.type != optimizer) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": the checkpoint's optimizer is ",
                                                   m->optimizer.type, ", the run's ", optimizer));
  }
  initialised_ = false;  // until every state is read
  std::vector<float> host(device_.is_cpu() ? 0 : range_.size());
  for (const auto& [state, where] : checkpoint_state(t)) {
    absl::Status read = checkpoint::read_state(
        env, request.step_dir, *m, state, want, layout_.slice(), static_cast<int64_t>(range_.begin),
        static_cast<int64_t>(range_.end), device_.is_cpu() ? where : host.data());
    if (read.ok() && !device_.is_cpu()) {
      read = nn::copy_bytes(where, device_, host.data(), nn::Device::cpu(),
                            static_cast<int64_t>(host.size() * sizeof(float)));
    }
    if (!read.ok()) return read;
  }
  if (absl::Status r = refresh_compute_copy(t); !r.ok()) return r;
  prepared_ = 0;
  applied_step_ = m->step;
  updates_ = m->optimizer.updates;
  initialised_ = true;
  t.applied_step.store(applied_step_);
  t.restored_step.store(applied_step_);
  seed_buddy();
  return ShardLoadReport{
      .step = m->step,
      .bytes = static_cast<int64_t>(checkpoint_state(t).size() * range_.size() * sizeof(float)),
      .load_ms = now_ms() - start};
}

TROUPE_ACTOR_DEFINE(ParamShardActor);
TROUPE_ACTOR_CONSTRUCTOR_DEFINE(ParamShardActor, ShardOptions);

}  // namespace troupe::actors
