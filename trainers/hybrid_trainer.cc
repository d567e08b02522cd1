#include "trainers/hybrid_trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/generation.h"
#include "actors/stage_plan.h"
#include "actors/zero_partition.h"
#include "core/cluster/collective_group.h"
#include "core/status.h"
#include "nn/dtype.h"

namespace troupe::trainers {
namespace {

constexpr absl::Duration kSetupTimeout = absl::Seconds(120);

// Waits for every future, returning the first error - the first that is not
// a timeout if there is one: a member that failed leaves the others of its
// groups waiting for it, and its error is the cause.
// All within one kSetupTimeout.
template <class T>
absl::Status wait_all(std::vector<Future<T>>& pending) {
  const absl::Time deadline = absl::Now() + kSetupTimeout;
  absl::Status first, cause;
  for (Future<T>& f : pending) {
    absl::Status s;
    if constexpr (std::is_void_v<T>) {
      s = std::move(f).get_until(deadline);
    } else {
      s = std::move(f).get_until(deadline).status();
    }
    first.Update(s);
    if (!absl::IsDeadlineExceeded(s)) cause.Update(s);
  }
  return cause.ok() ? first : cause;
}

}  // namespace

actors::Mesh HybridTrainer::mesh() const {
  // Interleaved 1F1B: each stage's chunks are virtual stages of their own.
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
  if (config.zero.stage > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the hybrid trainer runs DDP or ZeRO-1 over dp (asked: ZeRO stage ",
                     config.zero.stage, ")"));
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
  std::vector<std::string> bundles(static_cast<size_t>(dp * stages), absl::StrCat("CPU=", tp));
  // A mesh the cluster cannot hold is named by the config keys that sized it
  // (Megatron's, where the config gave pp or tp under those).
  auto placing = [&](const absl::Status& s) {
    const ParallelConfig& p = config_.parallel;
    return absl::Status(
        s.code(), absl::StrCat("parallel.dp ", dp, " x ", p.pp_key, " ", stages,
                               tp > 1 ? absl::StrCat(" x ", p.tp_key, " ", tp) : std::string(),
                               ": placing ", dp, " x ", stages, " stages (", tp,
                               tp == 1 ? " CPU" : " CPUs on one node", " each): ", s.message()));
  };
  absl::StatusOr<cluster::PlacementGroupId> pg =
      cluster_.create_placement_group(bundles, cluster::PlacementStrategy::kSpread, job_ + "/mesh");
  if (!pg.ok()) return placing(pg.status());
  placement_groups_.push_back(*pg);
  if (absl::Status s = cluster_.wait_placement_group(*pg, kSetupTimeout); !s.ok()) {
    return placing(s);
  }
  for (const actors::Coordinate& at : coordinates()) {
    absl::StatusOr<MemberActors> actors = spawn_at(at, pg->value, at.d * stages + at.p % stages);
    if (!actors.ok()) return actors.status();
    members_.push_back(*std::move(actors));
  }
  if (absl::Status s = declare_groups(); !s.ok()) return s;
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
      for (int t = 0; t < tp; ++t) {
        const MemberActors& m = members_[index(d, p, t)];
        controlled.push_back({.at = {.d = d, .p = p, .t = t},
                              .stage = stage_endpoint(m.stage),
                              .shard = shard_endpoint(m.shard),
                              .range = owned(actors::Coordinate{.d = d, .p = p, .t = t}),
                              .buddy = buddy_of({.d = d, .p = p, .t = t})});
      }
    }
  }
  ControllerOptions options = controller_options(config_);
  if (config_.fault_tolerance.enabled) {
    options.member_lost = [this](const actors::Coordinate& at) { return watch_.member_lost(at); };
  }
  absl::StatusOr<TrainerController> controller =
      TrainerController::create(mesh, std::move(controlled), std::move(options));
  if (!controller.ok()) return controller.status();
  controller_.emplace(*std::move(controller));
  if (config_.fault_tolerance.enabled) mark_whole();  // where each actor runs
  return controller_->connect_buddies();
}

absl::StatusOr<MemberActors> HybridTrainer::spawn_at(const actors::Coordinate& at, uint64_t pg,
                                                     int bundle) {
  SpawnOptions where;
  where.placement_group = pg;
  where.bundle_index = bundle;
  // With fault tolerance the head restarts a lost coordinate's actors in
  // their bundle, placed again elsewhere (trainers/recovery.h).
  if (config_.fault_tolerance.enabled) where.max_restarts = config_.fault_tolerance.max_failures;
  // An interleaved stage's chunks after the first take turns on its CPU.
  const bool first_chunk = at.p < config_.parallel.pp;
  const MemberPlace place{.at = at,
                          .mesh = mesh(),
                          .stage_resources = first_chunk ? "CPU=1" : "",
                          .names = job_,
                          .where = where,
                          .threads = threads_,
                          .dp_group = dp_group(at.p, at.t),
                          .pipe_group = pipe_group(at.d, at.t),
                          .tp_group = tp_group(at.d, at.p),
                          .shard_range = owned(at)};
  return spawn_member(cluster_, config_, place, &actors_);
}

int HybridTrainer::buddy_of(const actors::Coordinate& at) const {
  const int dp = config_.parallel.dp;
  if (config_.zero.stage == 0 || !config_.fault_tolerance.enabled || dp == 1) return -1;
  return static_cast<int>(index((at.d + 1) % dp, at.p, at.t));
}

nn::ParamRange HybridTrainer::owned(const actors::Coordinate& at) const {
  const nn::ParamRange& stage = ranges_[static_cast<size_t>(at.p)];
  if (config_.zero.stage == 0) return stage;
  return actors::ZeroPartition(stage, config_.parallel.dp, at.d).own();
}

std::vector<actors::Coordinate> HybridTrainer::coordinates() const {
  std::vector<actors::Coordinate> out;
  const actors::Mesh m = mesh();
  for (int d = 0; d < m.dp; ++d) {
    for (int p = 0; p < m.pp; ++p) {
      for (int t = 0; t < m.tp; ++t)
        out.push_back({.d = d, .p = p, .t = t});
    }
  }
  return out;
}

std::vector<ActorId> HybridTrainer::actors_at(const actors::Coordinate& at) const {
  const MemberActors& m = members_[index(at.d, at.p, at.t)];
  return {m.loader.id(), m.stage.id(), m.shard.id()};
}

absl::StatusOr<std::vector<LostMember>> HybridTrainer::find_lost(absl::Time deadline) {
  return watch_.find_lost(coordinates(), deadline, config_.fault_tolerance.wait_for_node_s);
}

absl::Status HybridTrainer::fence(const std::vector<LostMember>& hung) {
  return watch_.fence_hung(hung);
}

absl::Status HybridTrainer::await_replacements(const std::vector<LostMember>& lost,
                                               absl::Time deadline) {
  return watch_.await_replacements(
      lost, deadline,
      [this](const actors::Coordinate& at, absl::Time until) { return respawn(at, until); },
      config_.fault_tolerance.wait_for_node_s);
}

absl::Status HybridTrainer::respawn(const actors::Coordinate& at, absl::Time deadline) {
  // The node it was on must not rejoin with the old actors (best effort:
  // the new actors' ids differ from the old ones in any case).
  watch_.fence(at, "lost while the head was down").IgnoreError();
  absl::StatusOr<cluster::PlacementGroupId> pg = cluster_.create_placement_group(
      {"CPU=1"}, cluster::PlacementStrategy::kPack,
      absl::StrCat(job_, "/", actors::to_string(at), "-", placement_groups_.size()));
  if (!pg.ok()) return pg.status();
  placement_groups_.push_back(*pg);
  absl::Status placed =
      cluster_.wait_placement_group(*pg, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!placed.ok()) {
    return no_node_for(
        {actors::to_string(at)},
        absl::StrCat("its actors were lost while the head was down: ", placed.message()),
        config_.fault_tolerance.wait_for_node_s);
  }
  absl::StatusOr<MemberActors> actors = spawn_at(at, pg->value, 0);
  if (!actors.ok()) return actors.status();
  MemberActors& m = members_[index(at.d, at.p, at.t)];
  m = *std::move(actors);
  return controller_->replace_member(at, stage_endpoint(m.stage), shard_endpoint(m.shard));
}

void HybridTrainer::mark_whole() {
  watch_.mark_whole(coordinates());
}

std::string HybridTrainer::dp_group(int p, int t) const {
  return absl::StrCat(job_, "/dp/p", p, "t", t);
}
std::string HybridTrainer::pipe_group(int d, int t) const {
  return absl::StrCat(job_, "/pipe/d", d, "t", t);
}
std::string HybridTrainer::tp_group(int d, int p) const {
  return absl::StrCat(job_, "/tp/d", d, "p", p);
}

absl::Status HybridTrainer::declare_groups() {
  const actors::Mesh mesh = this->mesh();
  auto declare = [&](const std::string& name, auto&& coordinate_of, int n) -> absl::Status {
    if (n == 1) return absl::OkStatus();  // a stage alone needs no group
    std::vector<ActorId> stages;
    for (int i = 0; i < n; ++i) {
      const actors::Coordinate at = coordinate_of(i);
      stages.push_back(members_[index(at.d, at.p, at.t)].stage.id());
    }
    return declare_collective_group(cluster_, name, stages).status();
  };
  absl::Status s;
  for (int p = 0; p < mesh.pp; ++p) {
    for (int t = 0; t < mesh.tp; ++t)
      s.Update(declare(
          dp_group(p, t), [&](int i) { return actors::Coordinate{.d = i, .p = p, .t = t}; },
          mesh.dp));
  }
  for (int d = 0; d < mesh.dp; ++d) {
    for (int t = 0; t < mesh.tp; ++t)
      s.Update(declare(
          pipe_group(d, t), [&](int i) { return actors::Coordinate{.d = d, .p = i, .t = t}; },
          mesh.pp));
    for (int p = 0; p < mesh.pp; ++p)
      s.Update(declare(
          tp_group(d, p), [&](int i) { return actors::Coordinate{.d = d, .p = p, .t = i}; },
          mesh.tp));
  }
  return s;
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

absl::Status HybridTrainer::stop() {
  if (stopped_) return absl::OkStatus();
  stopped_ = true;
  return stop_job(cluster_, actors_, placement_groups_);
}

}  // namespace troupe::trainers
