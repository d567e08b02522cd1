#include "trainers/hybrid_trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/generation.h"
#include "actors/stage_plan.h"
#include "nn/dtype.h"
#include "trainers/job_device.h"

namespace troupe::trainers {

actors::Mesh HybridTrainer::mesh() const {
  return {.dp = config_.parallel.dp,
          .pp = config_.parallel.pp * config_.parallel.virtual_stages,
          .tp = config_.parallel.tp};
}

size_t HybridTrainer::index(int d, int p, int t) const {
  return static_cast<size_t>(actors::index_of(mesh(), {.d = d, .p = p, .t = t}));
}

absl::StatusOr<std::unique_ptr<HybridTrainer>> HybridTrainer::start(Cluster& cluster,
                                                                    const TrainConfig& config,
                                                                    const std::string& job,
                                                                    int threads) {
  if (config.zero.stage > 1 || config.elasticity.enabled) {
    return absl::InvalidArgumentError(
        absl::StrCat("the hybrid trainer runs DDP or ZeRO-1 over dp, without elasticity (asked: "
                     "ZeRO stage ",
                     config.zero.stage, config.elasticity.enabled ? ", elasticity" : "", ")"));
  }
  std::unique_ptr<HybridTrainer> trainer(new HybridTrainer(cluster, config, job, threads));
  if (absl::Status s = trainer->spawn_mesh(); !s.ok()) {
    trainer->stop().IgnoreError();
    return s;
  }
  return trainer;
}

std::string HybridTrainer::describe() const {
  const ParallelConfig& p = config_.parallel;
  std::string out;
  if (p.pp > 1) {
    absl::StrAppend(
        &out, "pipeline of ", p.pp, " stages (", actors::pipeline::schedule_name(p.schedule),
        p.virtual_stages > 1 ? absl::StrCat(", ", p.virtual_stages, " model chunks each")
                             : std::string(),
        ", ", config_.gradient_accumulation_steps, " micro-batches a step) x ");
  }
  if (p.tp > 1) absl::StrAppend(&out, "tensor parallelism over ", p.tp, " slices x ");
  absl::StrAppend(&out, "DDP over ", p.dp, p.dp == 1 ? " replica" : " replicas");
  return out;
}

absl::Status HybridTrainer::spawn_mesh() {
  const actors::Mesh mesh = this->mesh();
  const int dp = mesh.dp, pp = mesh.pp, tp = mesh.tp;
  // Every slice's layout has the same offsets: the ranges are any slice's.
  const nn::ModelLayout layout = nn::model_layout(config_.model, {.rank = 0, .size = tp});
  // Without a partition the stages balance their parameters (plan_stage);
  // "uniform" asks for Megatron's even split, given to them as a partition.
  if (config_.parallel.partition.empty() && config_.parallel.partition_method == "uniform") {
    config_.parallel.partition = actors::uniform_partition(config_.model.num_layers(), pp);
  }
  for (int p = 0; p < pp; ++p) {
    absl::StatusOr<actors::StagePlan> plan =
        actors::plan_stage(layout, pp, p, config_.parallel.partition);
    if (!plan.ok()) return plan.status();
    ranges_.push_back(plan->params);
  }
  // One bundle a pipeline stage of a replica, with a CPU for each of its tp
  // slices: a bundle lies on one node, so a tp group is packed in one (as
  // STRICT_PACK would); the bundles spread over the nodes where there are
  // enough: the pipeline's stages apart, the replicas apart. An interleaved
  // stage's chunks share its bundle: one process, taking turns on its CPUs.
  const int stages = config_.parallel.pp;
  std::vector<std::string> bundles(static_cast<size_t>(dp * stages), stage_bundle(config_, tp));
  // A mesh the cluster cannot hold is named by the config keys that sized it
  // (Megatron's, where the config gave pp or tp under those).
  auto placing = [&](const absl::Status& s) {
    const ParallelConfig& p = config_.parallel;
    return absl::Status(
        s.code(),
        absl::StrCat("parallel.dp ", dp, " x ", p.pp_key, " ", stages,
                     tp > 1 ? absl::StrCat(" x ", p.tp_key, " ", tp) : std::string(), ": placing ",
                     dp, " x ", stages, " stages (", stage_needs(config_, tp),
                     tp == 1 ? "" : " on one node", " each): ", s.message()));
  };
  absl::StatusOr<cluster::PlacementGroupId> pg = place_spread(bundles, job_ + "/mesh");
  if (!pg.ok()) return placing(pg.status());
  for (const actors::Coordinate& at : coordinates()) {
    absl::StatusOr<MemberActors> actors = spawn_at(at, *pg, at.d * stages + at.p % stages);
    if (!actors.ok()) return actors.status();
    members_.push_back(*std::move(actors));
  }
  return form_mesh();
}

absl::StatusOr<MemberActors> HybridTrainer::spawn_at(const actors::Coordinate& at,
                                                     cluster::PlacementGroupId pg, int bundle) {
  MemberPlace place = member_place(at, mesh(), pg, bundle, job_, config_);
  // An interleaved stage's chunks after the first take turns on its CPU.
  if (at.p >= config_.parallel.pp) place.stage_resources = "";
  return spawn_member(cluster_, config_, place, &actors_);
}

absl::StatusOr<MemberActors> HybridTrainer::spawn_replacement(const actors::Coordinate& at,
                                                              cluster::PlacementGroupId pg) {
  absl::StatusOr<MemberActors> actors = spawn_at(at, pg, 0);
  if (!actors.ok()) return actors.status();
  return members_[index(at.d, at.p, at.t)] = *std::move(actors);
}

std::string HybridTrainer::replacement_group(const actors::Coordinate& at) const {
  return absl::StrCat(job_, "/", actors::to_string(at));
}

absl::StatusOr<std::vector<float>> HybridTrainer::master_params() {
  // Replica 0's stages of each slice, in order, tile that slice (under
  // ZeRO-1 every replica's partition of each stage, in order); the slices
  // make up the whole model.
  const int tp = config_.parallel.tp;
  const int replicas = config_.zero.stage == 0 ? 1 : config_.parallel.dp;
  const nn::ModelLayout whole = nn::model_layout(config_.model);
  std::vector<float> out(whole.num_params());
  for (int t = 0; t < tp; ++t) {
    std::vector<ActorRef<actors::ParamShardActor>> shards;
    for (int p = 0; p < mesh().pp; ++p) {
      for (int d = 0; d < replicas; ++d)
        shards.push_back(members_[index(d, p, t)].shard);
    }
    absl::StatusOr<std::vector<float>> slice = gather_masters(shards, kSetupTimeout);
    if (!slice.ok()) return slice.status();
    const nn::ModelLayout layout = nn::model_layout(config_.model, {.rank = t, .size = tp});
    if (slice->size() != layout.num_params()) {
      return absl::InternalError(absl::StrCat("the shards of slice ", t, " hold ", slice->size(),
                                              " parameters of its ", layout.num_params()));
    }
    nn::copy_from_slice(whole, layout, slice->data(), out.data());
  }
  return out;
}

absl::StatusOr<std::unique_ptr<nn::Model>> HybridTrainer::whole_model() {
  absl::StatusOr<std::vector<float>> masters = master_params();
  if (!masters.ok()) return masters.status();
  absl::StatusOr<std::unique_ptr<nn::Model>> made =
      nn::create_model(config_.model, config_.model_options);
  if (!made.ok()) return made.status();
  nn::Model* model = made->get();
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
  return made;
}

absl::StatusOr<actors::EvalReport> HybridTrainer::evaluate(int samples) {
  absl::StatusOr<actors::EvalRequest> request = eval_request(config_, samples);
  if (!request.ok()) return request.status();
  absl::StatusOr<std::unique_ptr<nn::Model>> model = whole_model();
  if (!model.ok()) return model.status();
  return actors::evaluate_task(**model, *request);
}

absl::StatusOr<actors::ValidationResult> HybridTrainer::validate() {
  absl::StatusOr<actors::TokenDataset> data = validation_dataset(config_);
  if (!data.ok()) return data.status();
  // The stages hold only their blocks or slices: the driver scores the gathered weights.
  absl::StatusOr<std::unique_ptr<nn::Model>> model = whole_model();
  if (!model.ok()) return model.status();
  absl::StatusOr<actors::ValidationPart> part =
      actors::validation_loss(**model, *data, validation_request(config_, 0, 1));
  if (!part.ok()) return part.status();
  return actors::combine(std::span<const actors::ValidationPart>(&*part, 1), data->header());
}

absl::StatusOr<std::vector<int32_t>> HybridTrainer::generate(std::vector<int32_t> prompt,
                                                             int max_new_tokens, float temperature,
                                                             uint64_t seed) {
  absl::StatusOr<std::unique_ptr<nn::Model>> model = whole_model();
  if (!model.ok()) return model.status();
  absl::StatusOr<std::vector<std::vector<int32_t>>> out = actors::generate_tokens(
      **model, {std::move(prompt)},
      {.max_new_tokens = max_new_tokens, .temperature = temperature, .seed = seed});
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

}  // namespace troupe::trainers
