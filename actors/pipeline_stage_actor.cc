#include "actors/pipeline_stage_actor.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "actors/data/data_loader.h"
#include "actors/failpoint.h"
#include "actors/generation.h"
#include "actors/handoff.h"
#include "actors/stage_sends.h"
#include "actors/step_clock.h"
#include "core/cluster/gpus.h"
#include "core/status.h"
#include "nn/optim/clip.h"
#include "nn/threads.h"

namespace troupe::actors {
namespace {

// The micro-batches a pipelined step may have: their number is a field of
// the messages' tags (pipeline_stage_schedule.cc).
constexpr int kMaxMicroBatches = 1 << 20;

absl::Status check_options(const StageOptions& o) {
  const std::string where = absl::StrCat("stage ", to_string(o.at));
  if (o.micro_batch < 1 || o.grad_accum < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": micro_batch ", o.micro_batch, " and grad_accum ", o.grad_accum, " must be >= 1"));
  }
  if (o.mesh.dp < 1 || o.mesh.pp < 1 || o.mesh.tp < 1 || !contains(o.mesh, o.at)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not in the mesh dp ", o.mesh.dp,
                                                   " x pp ", o.mesh.pp, " x tp ", o.mesh.tp));
  }
  if (const int zero = zero_stage(o.gradient_sync); zero > 1 && (o.mesh.tp > 1 || o.mesh.pp > 1)) {
    const std::string model_parallel =
        o.mesh.tp > 1 ? absl::StrCat("tensor parallelism (tp ", o.mesh.tp, ")")
                      : absl::StrCat("pipeline parallelism (pp ", o.mesh.pp, ")");
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ZeRO-", zero, " with ", model_parallel,
                     " is not implemented yet; with model parallelism the gradients are averaged "
                     "by allreduce (zero_optimization.stage 0) or reduce-scattered to the "
                     "optimizer's partitions (stage 1)"));
  }
  if (o.mesh.tp > 1 && o.tp_group.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": tp ", o.mesh.tp, " needs the group of its stage's slices"));
  }
  const int v = o.virtual_stages;
  if ((o.schedule == pipeline::ScheduleKind::kInterleaved) != (v > 1) || v < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", v, " model chunks a stage (virtual_stages) with schedule \"",
        pipeline::schedule_name(o.schedule), "\"; \"interleaved\" takes 2 or more, the others 1"));
  }
  if (v > 1 && (o.mesh.pp % v != 0 || o.mesh.pp / v < 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": interleaved 1F1B of ", v, " chunks a stage over ", o.mesh.pp,
                     " virtual stages: they must be at least 2 stages of ", v, " chunks each"));
  }
  if (o.mesh.pp > 1) {
    if (static_cast<int>(o.schedule) > static_cast<int>(pipeline::ScheduleKind::kInterleaved)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": pipeline schedule ",
                                                     static_cast<int>(o.schedule),
                                                     " is not gpipe, 1f1b or interleaved"));
    }
    if (o.grad_accum > kMaxMicroBatches) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", o.grad_accum,
                                                     " micro-batches a step; at most ",
                                                     kMaxMicroBatches, " with pp > 1"));
    }
    if (o.pipe_group.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": pp ", o.mesh.pp, " needs the pipe group of its replica's stages"));
    }
  }
  if (o.precision != nn::DType::kFloat32 && o.precision != nn::DType::kBFloat16 &&
      o.precision != nn::DType::kFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": precision ", static_cast<int>(o.precision), " is not fp32, fp16 or bf16"));
  }
  if (zero_stage(o.gradient_sync) > 3) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": gradient sync ",
                                                   zero_stage(o.gradient_sync),
                                                   " is not allreduce or a ZeRO stage 1-3"));
  }
  return absl::OkStatus();
}

GradientSyncOptions sync_options(const StageOptions& o) {
  return {.kind = o.gradient_sync,
          .bucket_elements = o.bucket_elements,
          .overlap_comm = o.overlap_comm,
          .micro_batches = o.grad_accum,
          .prefetch_elements = o.prefetch_elements,
          .persistence_threshold = o.persistence_threshold,
          .max_live_parameters = o.max_live_parameters};
}

// The device the stage computes on: the CPU, or the first GPU its actor holds.
absl::StatusOr<nn::Device> stage_device(const StageOptions& options) {
  if (options.device == nn::DeviceKind::kCpu) return nn::Device::cpu();
  const std::vector<int> gpus = cluster::gpu_ids();
  if (gpus.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", to_string(options.at),
        ": device cuda, but its actor holds no GPU (a stage on CUDA is spawned with GPU=1 on a "
        "worker that offers GPUs)"));
  }
  return nn::Device::cuda(gpus.front());
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineStageActor>> PipelineStageActor::create(
    const StageOptions& options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  absl::StatusOr<nn::Device> device = stage_device(options);
  if (!device.ok()) return device.status();
  // A pipeline stage binds buffers of its own range into the model
  // (actors/stage_buffers.h).
  nn::ModelStorage storage = options.mesh.pp > 1
                                 ? nn::ModelStorage{.parameters = false, .gradients = false}
                                 : model_storage(options.gradient_sync, options.mesh.dp);
  storage.device = *device;
  // On a GPU the products take the compute precision's operands (bf16, fp16), as autocast's do;
  // the CPU computes in fp32 on the rounded weights.
  nn::ModelOptions model_options = options.model_options;
  if (!device->is_cpu()) model_options.matmul = options.precision;
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::create_model(
      options.model, model_options, storage, {.rank = options.at.t, .size = options.mesh.tp});
  if (!model.ok()) {
    return Prefixed(absl::StrCat("stage ", to_string(options.at), ": "), model.status());
  }
  absl::StatusOr<StagePlan> plan =
      plan_stage((*model)->layout(), options.mesh.pp, options.at.p, options.partition);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<PipelineStageActor> stage(
      new PipelineStageActor(options, *plan, *std::move(model)));
  absl::StatusOr<nn::DeviceBackend*> device_backend = nn::backend(device->kind);
  if (!device_backend.ok()) return device_backend.status();
  stage->device_backend_ = *device_backend;
  if (absl::Status s = stage->reschedule(); !s.ok()) return s;
  if (options.virtual_stages > 1) {
    // Interleaved: this actor is chunk `chunk` of stage `physical` of `stages`.
    const int stages = options.mesh.pp / options.virtual_stages;
    const int physical = options.at.p % stages;
    stage->chunk_ = options.at.p / stages;
    stage->turns_ = StageTurns::of(
        actor_name(options.job, "turns", {.d = options.at.d, .p = physical, .t = options.at.t}),
        stage->schedule_.programs[static_cast<size_t>(physical)]);
    stage->turns_->join(stage->chunk_);
  }
  if (options.mesh.pp > 1) {
    absl::StatusOr<std::unique_ptr<StageBuffers>> buffers = StageBuffers::stage(
        *stage->model_, stage->plan_.params,
        stage->plan_.last() && !stage->plan_.first() && stage->model_->layout().tied_head());
    if (!buffers.ok()) return buffers.status();
    stage->buffers_ = *std::move(buffers);
  } else {
    stage->buffers_ = StageBuffers::whole(*stage->model_);
  }
  // ZeRO-2/3: the partition of what the model does not hold whole.
  const ZeroPartition& part = stage->partition_;
  if (!storage.parameters && options.mesh.pp == 1) {
    if (absl::Status s =
            stage->own_params_.reset(nn::MemoryCategory::kParameters, part.own().size(),
                                     /*zero=*/true, *device);
        !s.ok()) {
      return s;
    }
  }
  if (!storage.gradients && options.mesh.pp == 1) {
    if (absl::Status s = stage->own_grads_.reset(nn::MemoryCategory::kGradients, part.own().size(),
                                                 /*zero=*/true, *device);
        !s.ok()) {
      return s;
    }
  }
  stage->publish_tensors();
  // The sync is made now (with the group joined in setup) so that a kind,
  // plan or setting it cannot serve fails the spawn rather than the first
  // step; with dp > 1 a trial one, since the group comes in setup.
  if (options.mesh.dp == 1) {
    absl::StatusOr<std::unique_ptr<GradientSync>> sync = make_gradient_sync(
        sync_options(options), stage->plan_, *stage->model_, nullptr, *stage->buffers_);
    if (!sync.ok()) return sync.status();
    stage->sync_ = *std::move(sync);
  } else if (absl::Status s = check_gradient_sync(sync_options(options), *stage->model_); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("stage ", to_string(options.at), ": ", s.message()));
  }
  return stage;
}

PipelineStageActor::PipelineStageActor(StageOptions options, StagePlan plan,
                                       std::unique_ptr<nn::Model> model)
    : options_(std::move(options)),
      name_(actor_name(options_.job, "stage", options_.at)),
      loader_name_(actor_name(options_.job, "loader", options_.at)),
      plan_(plan),
      model_(std::move(model)),
      sends_(std::make_unique<StageSends>()),
      partition_(plan_.params, options_.mesh.dp, options_.at.d) {
  if (options_.threads > 0) nn::set_num_threads(options_.threads);
}

absl::Status PipelineStageActor::reschedule() {
  const int stages = options_.mesh.pp / options_.virtual_stages;
  const int physical = options_.at.p % stages, chunk = options_.at.p / stages;
  const pipeline::ScheduleKind kind =
      options_.mesh.pp > 1 ? options_.schedule : pipeline::ScheduleKind::kOneFOneB;
  absl::StatusOr<pipeline::Schedule> made =
      pipeline::make_schedule(kind, stages, options_.grad_accum, options_.virtual_stages);
  if (!made.ok()) return made.status();
  if (absl::Status s = pipeline::check_schedule(*made); !s.ok()) return s;
  schedule_ = *std::move(made);
  program_ = pipeline::chunk_program(schedule_, physical, chunk);
  // It keeps its blocks' activations, one set per micro-batch its program
  // holds at once.
  if (absl::Status s = model_->set_part(plan_.block_begin, plan_.block_end, plan_.last()); !s.ok())
    return s;
  return model_->set_activation_slots(pipeline::most_held(program_.ops));
}

void PipelineStageActor::publish_tensors() {
  tensors_ = std::make_shared<StageTensors>();
  // What the stage's buffers hold (a pipeline stage's copy of the embedding aside: not
  // its to update), or under ZeRO-2/3 its partition.
  const nn::ParamRange held = buffers_->range();
  const bool partitioned_params = options_.mesh.pp == 1 && model_->params() == nullptr;
  const bool partitioned_grads = options_.mesh.pp == 1 && model_->grads() == nullptr;
  tensors_->params = partitioned_params ? own_params_.data() : buffers_->params(held.begin);
  tensors_->params_held = partitioned_params ? partition_.own() : held;
  tensors_->grads = partitioned_grads ? own_grads_.data() : buffers_->grads(held.begin);
  tensors_->grads_held = partitioned_grads ? partition_.own() : held;
  tensors_->n = model_->num_params();
  tensors_->device = model_->device();
  Handoff::publish(name_, tensors_);
}

PipelineStageActor::~PipelineStageActor() {
  if (turns_ != nullptr) turns_->leave(chunk_);
  if (tensors_ != nullptr) tensors_->set_group(nullptr);
  sync_.reset();  // before the group its reductions run on
  pipe_.reset();
  tp_.reset();
  if (tensors_ != nullptr) Handoff::retract(name_, tensors_.get());
}

absl::Status PipelineStageActor::setup() {
  loader_ = Handoff::find<DataLoader>(loader_name_);
  if (loader_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": its data loader ", loader_name_, " is not in this process"));
  }
  if (options_.mesh.dp == 1 && sync_ == nullptr) {  // resized to one rank: no group
    absl::StatusOr<std::unique_ptr<GradientSync>> sync =
        make_gradient_sync(sync_options(options_), plan_, *model_, nullptr, *buffers_);
    if (!sync.ok()) return sync.status();
    sync_ = *std::move(sync);
  }
  if (options_.mesh.dp > 1 && group_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CollectiveGroup>> group =
        CollectiveGroup::join(options_.group, absl::Seconds(60), group_device());
    if (!group.ok()) return group.status();
    // The partitions follow d; the group's ranks must too.
    if ((*group)->rank() != options_.at.d || (*group)->world_size() != options_.mesh.dp) {
      return absl::InternalError(absl::StrCat(name_, ": rank ", (*group)->rank(), " of ",
                                              (*group)->world_size(), " in its group, not ",
                                              options_.at.d, " of ", options_.mesh.dp));
    }
    absl::StatusOr<std::unique_ptr<GradientSync>> sync =
        make_gradient_sync(sync_options(options_), plan_, *model_, group->get(), *buffers_,
                           {.own_params = own_params_.data(), .own_grads = own_grads_.data()});
    if (!sync.ok()) return sync.status();
    group_ = *std::move(group);
    sync_ = *std::move(sync);
    tensors_->set_group(group_.get());
  }
  if (options_.mesh.pp > 1 && pipe_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CollectiveGroup>> pipe =
        join_model_parallel("pipe", options_.pipe_group, options_.at.p, options_.mesh.pp);
    if (!pipe.ok()) return pipe.status();
    pipe_ = *std::move(pipe);
  }
  if (options_.mesh.tp > 1 && tp_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CollectiveGroup>> tp =
        join_model_parallel("tp", options_.tp_group, options_.at.t, options_.mesh.tp);
    if (!tp.ok()) return tp.status();
    tp_ = *std::move(tp);
    // Through tp_, whichever generation of the group it holds (rejoin).
    auto reduce = [this](ReduceOp op) {
      return [this, op](float* data, size_t count) -> absl::Status {
        if (tp_ == nullptr) return absl::FailedPreconditionError(name_ + ": not in a tp group");
        return tp_->allreduce(DType::kFloat32, op, data, count);
      };
    };
    model_->set_tensor_parallel(reduce(ReduceOp::kSum), reduce(ReduceOp::kMax));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CollectiveGroup>> PipelineStageActor::join_model_parallel(
    const char* kind, const std::string& name, int rank, int size) const {
  // A pipe receive waits out its schedule's bubble, which on a CPU can last
  // long; a failed stage aborts its groups, so the others do not wait that long.
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> group =
      CollectiveGroup::join(name, kPipeTimeout, group_device());
  if (!group.ok()) return group.status();
  if ((*group)->rank() != rank || (*group)->world_size() != size) {
    return absl::InternalError(absl::StrCat(name_, ": rank ", (*group)->rank(), " of ",
                                            (*group)->world_size(), " in its ", kind,
                                            " group, not ", rank, " of ", size));
  }
  return group;
}

absl::Status PipelineStageActor::rejoin() {
  if (const int64_t held = tensors_->held_step.load(); held != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": rejoin while it holds the gradients of step ", held, " (discard it first)"));
  }
  if (options_.mesh.dp > 1) leave_group();
  pipe_.reset();
  tp_.reset();
  whole_version_ = -1;
  return setup();
}

void PipelineStageActor::leave_group() {
  if (sync_ != nullptr) sync_->drain();
  sync_.reset();  // before the group its reductions ran on
  tensors_->set_group(nullptr);
  group_.reset();
}

absl::Status PipelineStageActor::resize(StageShape shape) {
  if (options_.mesh.pp > 1 || options_.mesh.tp > 1) {
    return absl::UnimplementedError(absl::StrCat(name_, ": resizing a model-parallel mesh (pp ",
                                                 options_.mesh.pp, ", tp ", options_.mesh.tp,
                                                 ") is not implemented"));
  }
  const int zero = zero_stage(options_.gradient_sync);
  if (loader_ == nullptr || sync_ == nullptr) {
    // A replacement: set up at the shape (under ZeRO with the partition of
    // its rank now, which its shard restores), its loader reshaped after.
    options_.mesh.dp = shape.dp;
    options_.at.d = shape.rank;
    options_.micro_batch = shape.micro_batch;
    options_.grad_accum = shape.grad_accum;
    if (absl::Status s = reschedule(); !s.ok()) return s;
    if (zero > 0) {
      if (absl::Status s = repartition(); !s.ok()) return s;
    }
    if (absl::Status s = setup(); !s.ok()) return s;
    return Prefixed(name_ + ": ", loader_->reshape(shape.dp, shape.rank, shape.micro_batch,
                                                   shape.grad_accum, shape.position));
  }
  if (const int64_t held = tensors_->held_step.load(); held != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": resize while it holds the gradients of step ", held, " (discard it first)"));
  }
  if (zero >= 2 && (shape.dp == 1) != (options_.mesh.dp == 1)) {
    // At dp 1 the model holds what ZeRO-2/3 partitions: another model.
    return absl::UnimplementedError(absl::StrCat(
        name_, ": resizing a ZeRO-", zero, " job from dp ", options_.mesh.dp, " to dp ", shape.dp,
        " is not implemented: at dp 1 the model holds its whole gradients",
        zero == 3 ? " and parameters" : ""));
  }
  if (absl::Status s = loader_->reshape(shape.dp, shape.rank, shape.micro_batch, shape.grad_accum,
                                        shape.position);
      !s.ok()) {
    return Prefixed(name_ + ": ", s);
  }
  // Out of the old group (the sync counts micro-batches: it goes too), then
  // into the new one as setup() does.
  leave_group();
  options_.mesh.dp = shape.dp;
  options_.at.d = shape.rank;
  options_.micro_batch = shape.micro_batch;
  options_.grad_accum = shape.grad_accum;
  whole_version_ = -1;
  if (absl::Status s = reschedule(); !s.ok()) return s;
  if (zero > 0) {
    // The partition follows the rank and the size; its shard fills it
    // (ParamShardActor::adopt_partition).
    if (absl::Status s = repartition(); !s.ok()) return s;
  }
  return setup();
}

absl::Status PipelineStageActor::repartition() {
  partition_ = ZeroPartition(plan_.params, options_.mesh.dp, options_.at.d);
  const size_t n = partition_.own().size();
  if (model_->params() == nullptr) {
    if (absl::Status s = own_params_.reset(nn::MemoryCategory::kParameters, n); !s.ok()) return s;
    tensors_->params = own_params_.data();
    tensors_->params_held = partition_.own();
  }
  if (model_->grads() == nullptr) {
    if (absl::Status s = own_grads_.reset(nn::MemoryCategory::kGradients, n); !s.ok()) return s;
    tensors_->grads = own_grads_.data();
    tensors_->grads_held = partition_.own();
  }
  return absl::OkStatus();
}

absl::Status PipelineStageActor::check_turn(int64_t step) const {
  const int64_t held = tensors_->held_step.load();
  const int64_t applied = tensors_->applied_step.load();
  if (held != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": run_step for step ", step, " while step ", held,
                     " is in flight (commit or discard it first)"));
  }
  const bool next = step == last_run_ + 1;
  const bool again = step == last_run_ && applied < step;
  if (!next && !again) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": run_step for step ", step, ", but the last step run was ", last_run_,
                     " and the last applied ", applied, ": the next step is ", last_run_ + 1,
                     applied < last_run_ ? absl::StrCat(" (or ", last_run_, " again)") : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepReport> PipelineStageActor::run_step(StepRequest request) {
  // Interleaved: its stage's other chunks wait for this one's ops of the step
  // from now on, until it is done with it (finished, failed or refused).
  if (turns_ != nullptr) turns_->begin(chunk_, request.step);
  absl::Cleanup done = [this] {
    if (turns_ != nullptr) turns_->end(chunk_);
  };
  if (loader_ == nullptr || sync_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": run_step before setup");
  }
  // The shard loaded a checkpoint: the stage continues from its step.
  if (const int64_t restored = tensors_->restored_step.exchange(-1); restored >= 0) {
    last_run_ = restored;
    whole_version_ = -1;
  }
  if (absl::Status s = check_turn(request.step); !s.ok()) return s;
  last_run_ = request.step;
  tensors_->running_step.store(request.step);
  absl::StatusOr<StepReport> report = run_schedule(request);
  tensors_->running_step.store(0);
  if (!report.ok()) {
    absl::Status failed = Prefixed(name_ + ": ", report.status());
    // The rest of the group may be waiting in this step's reductions for
    // this rank's share, its neighbours for its activations or gradients:
    // they fail now rather than at their timeout.
    // Each group that has not failed yet learns of it (an abort of one is
    // the other's news).
    if (group_ != nullptr && group_->failed().ok())
      group_->abort(absl::AbortedError(failed.message()));
    if (pipe_ != nullptr && pipe_->failed().ok())
      pipe_->abort(absl::AbortedError(failed.message()));
    if (tp_ != nullptr && tp_->failed().ok()) tp_->abort(absl::AbortedError(failed.message()));
    // Then nothing of the failed step may still read or write the buffers
    // (a shard's load or init may come next).
    sync_->drain();
    if (pipe_ != nullptr) settle_sends(failed);
    return failed;
  }
  tensors_->held_step.store(request.step);
  return report;
}

absl::Status PipelineStageActor::start_step(const StepRequest& request, StepReport& report) {
  report.step = request.step;
  report.at = options_.at;
  report.holds_loss = plan_.last();
  report.chunks = options_.virtual_stages;
  report.slice_params = static_cast<int64_t>(model_->num_params());
  sync_->drain();  // nothing of a failed step may still write the gradients
  whole_version_ = -1;
  if (group_ != nullptr) traffic_at_step_ = group_->traffic();
  if (pipe_ != nullptr) {
    pipe_traffic_at_step_ = pipe_->traffic();
    pipe_in_place_at_step_ = pipe_->received_in_place();
  }
  if (tp_ != nullptr) tp_traffic_at_step_ = tp_->traffic();
  return sync_->begin_step();
}

absl::StatusOr<Batch> PipelineStageActor::next_batch(StepReport& report) {
  const int B = options_.micro_batch;
  const int T = options_.model.max_seq_len();
  absl::StatusOr<Batch> batch = loader_->next();
  if (!batch.ok()) return batch.status();
  if (batch->inputs.size() != static_cast<size_t>(B) * T) {
    return absl::InternalError(absl::StrCat(name_, ": the loader gave ", batch->inputs.size(),
                                            " tokens for a micro-batch of ", B, " x ", T));
  }
  report.data_position = batch->position + static_cast<int64_t>(B) * options_.mesh.dp;
  report.sample_ids.insert(report.sample_ids.end(), batch->sample_ids.begin(),
                           batch->sample_ids.end());
  report.epoch = batch->epoch;
  return batch;
}

absl::Status PipelineStageActor::discard(int64_t step) {
  const int64_t held = tensors_->held_step.load();
  const int64_t applied = tensors_->applied_step.load();
  if (step != last_run_ || step <= applied || (held != 0 && held != step)) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": discard of step ", step, ", but the last step run was ", last_run_,
        held != 0 ? absl::StrCat(" (its gradients held)") : "", " and the last applied ", applied));
  }
  if (sync_ != nullptr) sync_->drain();
  whole_version_ = -1;  // a ZeRO-3 drain let go of the whole copy
  model_->zero_grad();
  tensors_->held_step.store(0);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PipelineStageActor::seek_data(int64_t position,
                                                      int64_t from_samples_per_epoch) {
  if (loader_ == nullptr) return absl::FailedPreconditionError(name_ + ": seek_data before setup");
  return loader_->seek_rebased(position, from_samples_per_epoch);
}

absl::Status PipelineStageActor::gather_parameters() {
  if (sync_ == nullptr)
    return absl::FailedPreconditionError(name_ + ": gather_parameters before setup");
  const int64_t version = tensors_->params_version.load();
  whole_version_ = -1;  // until this gather succeeds
  if (absl::Status s = sync_->gather_parameters(); !s.ok()) {
    if (group_ != nullptr && !absl::IsAborted(s)) group_->abort(absl::AbortedError(s.message()));
    return absl::Status(s.code(), absl::StrCat(name_, ": gathering the parameters: ", s.message()));
  }
  whole_version_ = version;
  return absl::OkStatus();
}

absl::Status PipelineStageActor::check_whole_parameters() const {
  if (options_.mesh.pp > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": with pp ", options_.mesh.pp, " it holds only blocks [", plan_.block_begin, ", ",
        plan_.block_end, "); evaluate and generate run on a whole model"));
  }
  if (options_.mesh.tp > 1) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": with tp ", options_.mesh.tp,
                     " it holds only its slice; evaluate and generate run on a whole model"));
  }
  if (zero_stage(options_.gradient_sync) == 0 || options_.mesh.dp == 1) return absl::OkStatus();
  if (whole_version_ == tensors_->params_version.load()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(name_,
                   ": under ZeRO it holds only its partition of the parameters; call "
                   "gather_parameters on every stage of its group first"));
}

absl::StatusOr<EvalReport> PipelineStageActor::evaluate(EvalRequest request) {
  if (absl::Status s = check_whole_parameters(); !s.ok()) return s;
  return evaluate_task(*model_, request);
}

absl::StatusOr<ValidationPart> PipelineStageActor::validate(ValidationRequest request) {
  if (absl::Status s = check_whole_parameters(); !s.ok()) return s;
  if (!validation_data_ || validation_path_ != request.path) {
    absl::StatusOr<TokenDataset> data = TokenDataset::open(request.path);
    if (!data.ok()) return data.status();
    validation_data_ = *std::move(data);
    validation_path_ = request.path;
  }
  return validation_loss(*model_, *validation_data_, request);
}

absl::StatusOr<std::vector<int32_t>> PipelineStageActor::generate(std::vector<int32_t> prompt,
                                                                  int max_new_tokens,
                                                                  float temperature,
                                                                  uint64_t seed) {
  if (absl::Status s = check_whole_parameters(); !s.ok()) return s;
  absl::StatusOr<std::vector<std::vector<int32_t>>> out =
      generate_tokens(*model_, {std::move(prompt)},
                      {.max_new_tokens = max_new_tokens, .temperature = temperature, .seed = seed});
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

TROUPE_ACTOR_DEFINE(PipelineStageActor);
TROUPE_ACTOR_CONSTRUCTOR_DEFINE(PipelineStageActor, StageOptions);

}  // namespace troupe::actors
