#include "trainers/hybrid_trainer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/generation.h"
#include "actors/stage_plan.h"
#include "core/cluster/collective_group.h"
#include "core/status.h"
#include "nn/dtype.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(120);

// Waits for every future, returning the first error.
template <class T>
absl::Status wait_all(std::vector<Future<T>>& pending) {
  absl::Status first;
  for (Future<T>& f : pending) {
    if constexpr (std::is_void_v<T>) {
      first.Update(std::move(f).get(kSetupTimeout));
    } else {
      first.Update(std::move(f).get(kSetupTimeout).status());
    }
  }
  return first;
}

}  // namespace

size_t HybridTrainer::index(int d, int p) const {
  const actors::Mesh mesh{.dp = config_.parallel.dp, .pp = config_.parallel.pp, .tp = 1};
  return static_cast<size_t>(actors::index_of(mesh, {.d = d, .p = p, .t = 0}));
}

absl::StatusOr<std::unique_ptr<HybridTrainer>> HybridTrainer::start(Cluster& cluster,
                                                                    const TrainConfig& config,
                                                                    const std::string& job,
                                                                    int threads) {
  if (config.zero.stage != 0 || config.parallel.tp != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the hybrid trainer runs DDP over pipelines of pp stages with tp = 1 (asked: ZeRO stage ",
        config.zero.stage, ", tp ", config.parallel.tp, ")"));
  }
  std::unique_ptr<HybridTrainer> trainer(new HybridTrainer(cluster, config, job, threads));
  if (absl::Status s = trainer->spawn_mesh(); !s.ok()) {
    trainer->stop().IgnoreError();
    return s;
  }
  return trainer;
}

HybridTrainer::~HybridTrainer() {
  stop().IgnoreError();
}

std::string HybridTrainer::describe() const {
  const ParallelConfig& p = config_.parallel;
  return absl::StrCat("pipeline of ", p.pp, " stages (", p.schedule, ", ",
                      config_.gradient_accumulation_steps, " micro-batches a step) x DDP over ",
                      p.dp, p.dp == 1 ? " replica" : " replicas");
}

absl::Status HybridTrainer::spawn_mesh() {
  const int dp = config_.parallel.dp, pp = config_.parallel.pp;
  const actors::Mesh mesh{.dp = dp, .pp = pp, .tp = 1};
  const nn::GPTParamLayout layout(config_.model);
  for (int p = 0; p < pp; ++p) {
    absl::StatusOr<actors::StagePlan> plan =
        actors::plan_stage(layout, pp, p, config_.parallel.partition);
    if (!plan.ok()) return plan.status();
    ranges_.push_back(plan->params);
  }
  // One bundle a coordinate, spread over the nodes where there are enough:
  // the pipeline's stages apart, the replicas apart.
  std::vector<std::string> bundles(static_cast<size_t>(dp * pp), "CPU=1");
  absl::StatusOr<cluster::PlacementGroupId> pg =
      cluster_.create_placement_group(bundles, cluster::PlacementStrategy::kSpread, job_ + "/mesh");
  if (!pg.ok()) return pg.status();
  placement_groups_.push_back(*pg);
  if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("placing ", dp, " x ", pp, " stages (one CPU each): ", s.message()));
  }
  for (int d = 0; d < dp; ++d) {
    for (int p = 0; p < pp; ++p) {
      SpawnOptions where;
      where.placement_group = pg->value;
      where.bundle_index = static_cast<int>(index(d, p));
      const MemberPlace place{.at = {.d = d, .p = p, .t = 0},
                              .mesh = mesh,
                              .names = job_,
                              .where = where,
                              .threads = threads_,
                              .dp_group = absl::StrCat(job_, "/dp/p", p),
                              .pipe_group = absl::StrCat(job_, "/pipe/d", d),
                              .shard_range = ranges_[static_cast<size_t>(p)]};
      absl::StatusOr<MemberActors> actors = spawn_member(cluster_, config_, place, &actors_);
      if (!actors.ok()) return actors.status();
      members_.push_back(*std::move(actors));
    }
  }
  // The groups: each pipeline stage's across the replicas, each replica's
  // along its pipeline.
  if (dp > 1) {
    for (int p = 0; p < pp; ++p) {
      std::vector<ActorId> stages;
      for (int d = 0; d < dp; ++d)
        stages.push_back(members_[index(d, p)].stage.id());
      absl::StatusOr<uint64_t> declared =
          declare_collective_group(cluster_, absl::StrCat(job_, "/dp/p", p), stages);
      if (!declared.ok()) return declared.status();
    }
  }
  for (int d = 0; d < dp; ++d) {
    std::vector<ActorId> stages;
    for (int p = 0; p < pp; ++p)
      stages.push_back(members_[index(d, p)].stage.id());
    absl::StatusOr<uint64_t> declared =
        declare_collective_group(cluster_, absl::StrCat(job_, "/pipe/d", d), stages);
    if (!declared.ok()) return declared.status();
  }
  // setup() joins them: every stage at once.
  std::vector<Future<void>> joining;
  for (MemberActors& m : members_)
    joining.push_back(m.stage.call(&actors::PipelineStageActor::setup));
  if (absl::Status s = wait_all(joining); !s.ok()) return s;
  std::vector<Future<int64_t>> initialising;
  for (MemberActors& m : members_)
    initialising.push_back(m.shard.call(&actors::ParamShardActor::init));
  if (absl::Status s = wait_all(initialising); !s.ok()) return s;
  absl::StatusOr<actors::LoaderInfo> info =
      members_[0].loader.call(&actors::DataLoaderActor::info).get(kSetupTimeout);
  if (!info.ok()) return info.status();
  data_info_ = {.num_samples = info->num_samples,
                .steps_per_epoch = info->steps_per_epoch,
                .samples_per_epoch = info->samples_per_epoch};

  std::vector<MeshMember> controlled;
  for (int d = 0; d < dp; ++d) {
    for (int p = 0; p < pp; ++p) {
      const MemberActors& m = members_[index(d, p)];
      controlled.push_back({.at = {.d = d, .p = p, .t = 0},
                            .stage = stage_endpoint(m.stage),
                            .shard = shard_endpoint(m.shard),
                            .range = ranges_[static_cast<size_t>(p)],
                            .buddy = -1});
    }
  }
  absl::StatusOr<TrainerController> controller =
      TrainerController::create(mesh, std::move(controlled), controller_options(config_));
  if (!controller.ok()) return controller.status();
  controller_.emplace(*std::move(controller));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> HybridTrainer::master_params() {
  // Replica 0's stages, in order, tile the model.
  std::vector<ActorRef<actors::ParamShardActor>> shards;
  for (int p = 0; p < config_.parallel.pp; ++p)
    shards.push_back(members_[index(0, p)].shard);
  return gather_masters(shards, kSetupTimeout);
}

absl::StatusOr<nn::GPT> HybridTrainer::whole_model() {
  absl::StatusOr<std::vector<float>> masters = master_params();
  if (!masters.ok()) return masters.status();
  absl::StatusOr<nn::GPT> model = nn::GPT::create(config_.model, config_.model_options);
  if (!model.ok()) return model.status();
  if (masters->size() != model->num_params()) {
    return absl::InternalError(absl::StrCat("the shards hold ", masters->size(),
                                            " parameters of a model of ", model->num_params()));
  }
  // The values the stages compute with: the masters rounded to the compute type.
  const nn::DType precision = compute_precision(config_);
  const auto n = static_cast<int64_t>(masters->size());
  if (precision == nn::DType::kFloat32) {
    std::copy(masters->begin(), masters->end(), model->params());
  } else {
    std::vector<uint16_t> rounded(masters->size());
    nn::convert(masters->data(), nn::DType::kFloat32, rounded.data(), precision, n);
    nn::convert(rounded.data(), precision, model->params(), nn::DType::kFloat32, n);
  }
  return model;
}

absl::StatusOr<actors::EvalReport> HybridTrainer::evaluate(int samples) {
  absl::StatusOr<actors::EvalRequest> request = eval_request(config_, samples);
  if (!request.ok()) return request.status();
  absl::StatusOr<nn::GPT> model = whole_model();
  if (!model.ok()) return model.status();
  return actors::evaluate_task(*model, *request);
}

absl::StatusOr<std::vector<int32_t>> HybridTrainer::generate(std::vector<int32_t> prompt,
                                                             int max_new_tokens, float temperature,
                                                             uint64_t seed) {
  absl::StatusOr<nn::GPT> model = whole_model();
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<std::vector<int32_t>>> out = actors::generate_tokens(
      *model, {std::move(prompt)},
      {.max_new_tokens = max_new_tokens, .temperature = temperature, .seed = seed});
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

absl::Status HybridTrainer::stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  return stop_job(cluster_, actors_, placement_groups_);
}

}  // namespace troupe::trainers
