// PipelineStageActor: the layers of one pipeline stage of one replica, with
// their activations and gradients (docs/design.md, "Training"). A stage owns
// the blocks its StagePlan names (actors/stage_plan.h) and the parameter range
// that goes with them; how its gradients are exchanged with the other
// data-parallel ranks is its GradientSync (actors/gradient_sync.h). With
// pipeline parallelism (pp > 1) the activations of each micro-batch and
// their gradients go peer to peer between neighbouring stages of the
// replica, over its pipe group, in its schedule's order (actors/pipeline/);
// the first stage adds the last stage's share of the tied embedding's
// gradient to its own (docs/parallelism.md). Under interleaved 1F1B a stage
// actor is one model chunk of a stage (a virtual stage), taking turns with
// the stage's other chunks in its process (actors/stage_turns.h). With
// tensor parallelism (tp > 1) the stage's model is slice t of tp
// (nn/model/model.h): the tp ranks of a stage run the same micro-batches in
// step, summing over their tp group inside each block.
//
// A step, as the controller drives it:
//   run_step(k)   its schedule's program, op by op: for each of its
//                 micro-batches, take it from the loader of this coordinate,
//                 forward, backward (one stage: each forward then its
//                 backward; pp > 1: in its schedule's order, exchanging
//                 activations with its neighbours); the gradient sync reduces
//                 the gradients (as backward finishes them, pp = 1; after the
//                 last backward, pp > 1); reports loss, the owned range and
//                 its norm.
//   commit        by the parameter shard of this coordinate (in this process),
//                 only once every stage's run_step succeeded; or
//   discard(k)    drops the step's gradients (a failed or overflowed step).
//
// Step ids (actors/training_types.h): run_step(k) is accepted only when no
// step's gradients are held and k is the step after the last one run, or the
// last one run again if it was discarded or failed (never a committed one).
// discard(k) is accepted for the last step run, unless it was committed.
// After its shard loaded a checkpoint of step N (ParamShardActor::load), the
// stage's last step run is N.
// Anything else is FailedPrecondition naming both steps.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/generation.h"
#include "actors/gradient_sync.h"
#include "actors/mesh.h"
#include "actors/pipeline/schedule.h"
#include "actors/stage_buffers.h"
#include "actors/stage_plan.h"
#include "actors/stage_tensors.h"
#include "actors/stage_turns.h"
#include "actors/training_types.h"
#include "actors/validation.h"
#include "actors/zero_partition.h"
#include "core/actor.h"
#include "core/actor_declare.h"
#include "core/cluster/collective_group.h"
#include "nn/device_backend.h"
#include "nn/dtype.h"
#include "nn/memory.h"
#include "nn/model/model.h"

namespace troupe::actors {

class DataLoader;
class StageSends;
struct Batch;

struct StageOptions {
  std::string job;
  Coordinate at;
  Mesh mesh;
  nn::ModelConfig model;
  nn::ModelOptions model_options;
  int micro_batch = 1;
  int grad_accum = 1;
  GradientSyncKind gradient_sync = GradientSyncKind::kAllreduce;
  int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool overlap_comm = true;
  // ZeRO-3's gathering (GradientSyncOptions).
  int64_t prefetch_elements = 50000000;
  int64_t persistence_threshold = 100000;
  int64_t max_live_parameters = 1000000000;
  int threads = 0;    // compute threads; 0: leave the process's setting
  std::string group;  // the data-parallel collective group (declared by the controller)
  // The precision of the compute copy. kFloat16: the reduced gradients are
  // also rounded to fp16, as fp16 gradients are, so that a loss scale too
  // large for fp16 overflows (to inf) as it would on a GPU and the step is
  // skipped.
  nn::DType precision = nn::DType::kFloat32;
  // Pipeline parallelism (mesh.pp > 1): the schedule, each stage's blocks (parallel.partition;
  // empty: balanced by parameter count, actors/stage_plan.h), and the group of this replica's
  // stages (rank p) that activations and gradients go through. grad_accum is the number of
  // micro-batches a step. Interleaved 1F1B: each of mesh.pp / virtual_stages stages holds
  // virtual_stages chunks of the model, and this actor is one chunk - virtual stage at.p, chunk
  // at.p / stages of stage at.p % stages (the mesh's p and partition count
  // virtual stages); the chunks of a stage are spawned into one process and
  // take turns there (actors/stage_turns.h).
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;
  int virtual_stages = 1;
  std::vector<int64_t> partition;
  std::string pipe_group;
  // Tensor parallelism (mesh.tp > 1): the group of the stage's tp ranks
  // (rank t), over which its model sums what its slices computed.
  std::string tp_group;
  // Where the stage computes (docs/gpu.md): the CPU, or the GPU its actor holds (it is spawned
  // with GPU=1; cluster::gpu_ids()), which its shard and loader use too.
  nn::DeviceKind device = nn::DeviceKind::kCpu;
  TROUPE_FIELDS(job, at, mesh, model, model_options, micro_batch, grad_accum, gradient_sync,
                bucket_elements, overlap_comm, prefetch_elements, persistence_threshold,
                max_live_parameters, threads, group, precision, schedule, virtual_stages, partition,
                pipe_group, tp_group, device);
};

class PipelineStageActor {
 public:
  // Builds the stage's model (parameters zero until the shard's init).
  // InvalidArgument for a model, batch, coordinate, schedule or gradient sync
  // that cannot run (a model that does not split into tp slices; so far
  // ZeRO-2/3 with pp > 1 or tp > 1); ResourceExhausted without the memory.
  static absl::StatusOr<std::unique_ptr<PipelineStageActor>> create(const StageOptions& options);
  ~PipelineStageActor();

  // Joins the data-parallel group, with pp > 1 its pipe group and with
  // tp > 1 its tp group (every stage of the groups must call it; it waits
  // for the others), and finds this coordinate's loader.
  absl::Status setup();
  // Recovery (docs/fault_tolerance.md): leaves its groups' generations
  // (data-parallel, pipe and tp), one of which lost a member, and joins the
  // latest ones the controller declared (with the survivors and the
  // replacements), as setup() does; a replacement's first call. Every stage
  // of the groups must call it at once. FailedPrecondition while it holds a
  // step's gradients.
  absl::Status rejoin();
  // Elasticity: continues as rank shape.rank of shape.dp, running
  // shape.grad_accum micro-batches of shape.micro_batch a step, its loader
  // reshaped to continue at shape.position (DataLoader::reshape): leaves its
  // group's generation and joins the latest one the controller declared, as
  // rejoin() does, with every other stage of the new size (a new rank's stage
  // calls setup() and seek_data() instead). Its actor name, and so its shard
  // and loader, stay those it was spawned with. A stage not set up yet (a
  // replacement restarted with the options it was spawned with) is set up
  // at the shape. FailedPrecondition while it holds a step's gradients;
  // InvalidArgument for a shape its loader refuses (another global batch).
  // Under ZeRO its partition moves with its rank (its shard then adopts the
  // new one); Unimplemented for ZeRO-2/3 to or from dp 1, where the model
  // holds what they partition, and for pp > 1 or tp > 1.
  absl::Status resize(StageShape shape);
  // Runs step `request.step` (see above). The synchronised gradients stay
  // until commit or discard. Errors: FailedPrecondition before setup or for a
  // step out of turn; Aborted when a member of the group (or, pp > 1, of its
  // pipe group) was lost or failed; the loader's errors.
  absl::StatusOr<StepReport> run_step(StepRequest request);
  // Drops the gradients of step `step`, which was not committed.
  absl::Status discard(int64_t step);
  // Resuming from a checkpoint: makes its loader continue where a run whose
  // sampler had `from_samples_per_epoch` stopped at global `position`
  // (DataLoader::seek_rebased). Returns the position it continues at.
  absl::StatusOr<int64_t> seek_data(int64_t position, int64_t from_samples_per_epoch);
  // Makes the stage's whole parameters present, as its shards last wrote
  // them, for evaluate and generate (under ZeRO each rank holds only its
  // partition until then). A collective: call it on every stage of the
  // data-parallel group at once. Until the next run_step.
  absl::Status gather_parameters();
  absl::StatusOr<EvalReport> evaluate(EvalRequest request);
  // This rank's part of the validation loss (actors/validation.h) on the dataset at request.path
  // (opened once and kept). Requires the whole parameters, as evaluate does.
  absl::StatusOr<ValidationPart> validate(ValidationRequest request);
  // evaluate and generate: FailedPrecondition under ZeRO unless
  // gather_parameters ran since the shards last wrote the parameters, and
  // with pp > 1 or tp > 1 (a stage holds only its blocks or its slice; the
  // trainer evaluates the gathered weights).
  // Greedy (temperature 0) or sampled continuation of `prompt`.
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed);
  const StagePlan& plan() const { return plan_; }

 private:
  // How long a pipe group's receive, or a chunk's turn, may wait.
  static constexpr absl::Duration kPipeTimeout = absl::Minutes(10);
  // How long a failed step's sends may take to be let go of, twice.
  static constexpr absl::Duration kSettleTimeout = absl::Seconds(10);

  PipelineStageActor(StageOptions options, StagePlan plan, std::unique_ptr<nn::Model> model);
  // Publishes what the shard reaches (StageTensors), once the buffers exist.
  void publish_tensors();
  // Joins group `name` of a pipeline ("pipe") or a stage's slices ("tp"),
  // checking it is rank `rank` of `size` there.
  absl::StatusOr<std::unique_ptr<CollectiveGroup>> join_model_parallel(const char* kind,
                                                                       const std::string& name,
                                                                       int rank, int size) const;
  // Drains the gradient sync's reductions and drops it, the group and the
  // tensors' link to the group (rejoin, resize).
  void leave_group();
  // ZeRO: the partition of (options_.mesh.dp, options_.at.d), its buffers
  // (empty until the shard fills them) published to the shard.
  absl::Status repartition();
  absl::Status check_turn(int64_t step) const;
  absl::Status check_whole_parameters() const;
  // schedule_ and program_ for options_ (its mesh, coordinate and
  // grad_accum), and the model's part and activation slots to match. One
  // stage (pp 1) runs each micro-batch's forward, then its backward: 1F1B
  // of one stage, whatever the configured schedule (another order would
  // only hold more activations).
  absl::Status reschedule();
  // The step as its program orders it, op by op (pipeline_stage_schedule.cc).
  absl::StatusOr<StepReport> run_schedule(const StepRequest& request);
  // A tied head split over a pipeline (nothing to do for an untied one, or
  // a stage that holds both ends): the first stage
  // sends the token embedding to the last before the step, and the last the
  // head's share of its gradient back (add_embedding_grad).
  absl::Status share_embedding(int64_t step, StageSends& sends);
  // After a failed step: waits until the transport has let go of what the
  // step sent (dropping the pipe's connections if a peer takes nothing), so
  // that nothing reads the buffers the next load or step writes.
  void settle_sends(const absl::Status& why);
  void send_embedding_grad(int64_t step, StageSends& sends);
  absl::Status add_embedding_grad(int64_t step);
  // The loader's next micro-batch, checked, with its samples and position
  // recorded in `report`.
  absl::StatusOr<Batch> next_batch(StepReport& report);
  // What every step does first: the report's header, the sync's begin_step.
  absl::Status start_step(const StepRequest& request, StepReport& report);
  // The report's fields every step fills the same way, after the reduction.
  absl::Status finish_report(StepReport& report, double start);
  // The squared norm of the owned gradients that this rank counts: on a
  // tensor-parallel rank t > 0 without the tensors every rank holds whole
  // (rank 0 counts them), so that the controller's sum counts each once.
  absl::StatusOr<double> owned_norm_squared(const nn::ParamRange& owned, const float* grads) const;

  StageOptions options_;  // mesh, at, micro_batch and grad_accum as resize last set them
  std::string name_;
  std::string loader_name_;  // of the coordinate it was spawned at
  StagePlan plan_;
  std::unique_ptr<nn::Model> model_;
  std::shared_ptr<StageTensors> tensors_;
  std::unique_ptr<CollectiveGroup> group_;
  std::unique_ptr<CollectiveGroup> pipe_;  // pp > 1: this replica's stages, rank p
  std::unique_ptr<StageSends> sends_;      // what the pipe's transport may still read
  std::unique_ptr<CollectiveGroup> tp_;    // tp > 1: this stage's slices, rank t
  pipeline::Schedule schedule_;            // its stage's (of all its chunks)
  pipeline::ChunkProgram program_;         // what this actor runs of it
  int chunk_ = 0;                          // interleaved: its chunk of the stage
  std::shared_ptr<StageTurns> turns_;      // interleaved: its stage's turns
  std::unique_ptr<GradientSync> sync_;
  std::shared_ptr<DataLoader> loader_;
  int64_t last_run_ = 0;  // the last step run_step was called for (0: none)
  // The device its groups move device buffers on (CollectiveGroup::join): its model's GPU, or
  // -1 on the CPU (host buffers only).
  int group_device() const { return model_->device().is_cpu() ? -1 : model_->device().index; }
  // Its model's device's backend: the norms and roundings of the gradients it owns.
  nn::DeviceBackend* device_backend_ = &nn::cpu_backend();
  // pp > 1, first stage, tied head: its share of the embedding's gradient, on its device.
  nn::FloatBuffer head_share_;
  // ZeRO: this rank's partition of what the model does not hold whole.
  ZeroPartition partition_;
  // The flat buffers it computes with: the model's, or a pipeline stage's
  // range alone (actors/stage_buffers.h).
  std::unique_ptr<StageBuffers> buffers_;
  nn::FloatBuffer own_params_;  // ZeRO-3
  nn::FloatBuffer own_grads_;   // ZeRO-2, -3
  // The parameters' version (StageTensors::params_version) the model holds
  // whole, after gather_parameters; -1: not whole.
  int64_t whole_version_ = -1;
  std::optional<TokenDataset> validation_data_;  // validate's dataset, once opened
  std::string validation_path_;                  // where it was opened from
  // The groups' traffic when the step began: data-parallel, pipe, tp.
  transport::Traffic traffic_at_step_, pipe_traffic_at_step_, tp_traffic_at_step_;
  uint64_t pipe_in_place_at_step_ = 0;  // the pipe group's received_in_place then
};
TROUPE_ACTOR_DECLARE(PipelineStageActor, &PipelineStageActor::setup, &PipelineStageActor::rejoin,
                     &PipelineStageActor::resize, &PipelineStageActor::run_step,
                     &PipelineStageActor::discard, &PipelineStageActor::seek_data,
                     &PipelineStageActor::gather_parameters, &PipelineStageActor::evaluate,
                     &PipelineStageActor::generate, &PipelineStageActor::validate);
// Other processes spawn it with its options: spawn<PipelineStageActor>(spawn_options,
// stageOptions).
TROUPE_ACTOR_CONSTRUCTOR_DECLARE(PipelineStageActor, StageOptions);

}  // namespace troupe::actors
