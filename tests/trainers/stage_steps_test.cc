// The training actors of one coordinate - a stage, its parameter shard and
// its data loader - on an in-process ActorSystem: the step protocol (every
// step-changing call refused for a step out of turn), a shard that owns a
// range of its stage, the stage plans (and a stage that stops computing once
// its step cannot succeed), the factories' errors, and the controller
// driving the real actors without any process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/data/data_loader_actor.h"
#include "actors/handoff.h"
#include "actors/param_shard_actor.h"
#include "actors/pipeline_stage_actor.h"
#include "actors/stage_plan.h"
#include "core/actor.h"
#include "nn/model/model.h"
#include "trainers/config.h"
#include "trainers/trainer.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {
namespace {

using actors::CommitRequest;
using actors::DataLoaderActor;
using actors::ParamShardActor;
using actors::PipelineStageActor;
using actors::StepReport;
using actors::StepRequest;

constexpr absl::Duration kWait = absl::Seconds(60);

TrainConfig small_config() {
  TrainConfig c;
  c.parallel.dp = 1;
  c.micro_batch_size = 4;
  c.gradient_accumulation_steps = 2;
  c.train_batch_size = 8;
  c.model = nn::GPTConfig{.max_seq_len = 16,
                          .vocab_size = 256,
                          .padded_vocab_size = 256,
                          .num_layers = 2,
                          .num_heads = 2,
                          .channels = 32};
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 400, .seed = 3};
  c.optimizer.adamw = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
  c.lr_schedule = nn::LrSchedule::constant(3e-3f);
  c.training.seed = 5;
  return c;
}

actors::StageOptions stage_options(const TrainConfig& c, const std::string& job) {
  return {.job = job,
          .at = {},
          .mesh = {.dp = 1, .pp = 1, .tp = 1},
          .model = c.model,
          .micro_batch = static_cast<int>(c.micro_batch_size),
          .grad_accum = static_cast<int>(c.gradient_accumulation_steps),
          .threads = 1};
}

actors::ShardOptions shard_options(const TrainConfig& c, const std::string& job,
                                   nn::ParamRange range = {}) {
  return {.job = job,
          .at = {},
          .model = c.model,
          .range = range,
          .optimizer = optimizer_spec(c.optimizer),
          .seed = c.training.seed};
}

bool contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

class StageStepsTest : public ::testing::Test {
 protected:
  // Spawns the three actors of coordinate (0, 0, 0) of `job`, sets the stage
  // up and initialises the shard.
  void start(const std::string& job, nn::ParamRange range = {}) {
    auto loader = system_.spawn<DataLoaderActor>({}, loader_options(config_, job, 0));
    ASSERT_TRUE(loader.ok()) << loader.status();
    auto stage = system_.spawn<PipelineStageActor>({}, stage_options(config_, job));
    ASSERT_TRUE(stage.ok()) << stage.status();
    auto shard = system_.spawn<ParamShardActor>({}, shard_options(config_, job, range));
    ASSERT_TRUE(shard.ok()) << shard.status();
    loader_ = *loader;
    stage_ = *stage;
    shard_ = *shard;
    ASSERT_TRUE(stage_.call(&PipelineStageActor::setup).get(kWait).ok());
    ASSERT_TRUE(shard_.call(&ParamShardActor::init).get(kWait).ok());
  }
  absl::StatusOr<StepReport> run(int64_t step) {
    return stage_.call(&PipelineStageActor::run_step, StepRequest{.step = step}).get(kWait);
  }
  absl::Status discard(int64_t step) {
    return stage_.call(&PipelineStageActor::discard, step).get(kWait);
  }
  absl::Status prepare(int64_t step) {
    return shard_.call(&ParamShardActor::prepare, step).get(kWait);
  }
  absl::StatusOr<int64_t> commit(int64_t step) {
    return shard_.call(&ParamShardActor::commit, CommitRequest{.step = step, .lr = 3e-3f})
        .get(kWait);
  }
  std::vector<float> masters() {
    absl::StatusOr<std::vector<float>> p = shard_.call(&ParamShardActor::master_params).get(kWait);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : std::vector<float>{};
  }

  TrainConfig config_ = small_config();
  ActorSystem system_{{.threads = 2}};
  ActorRef<DataLoaderActor> loader_;
  ActorRef<PipelineStageActor> stage_;
  ActorRef<ParamShardActor> shard_;
};

TEST_F(StageStepsTest, EveryStepChangingCallIsRefusedOutOfTurn) {
  start("steps");
  const size_t n = nn::model_layout(config_.model).num_params();
  absl::StatusOr<StepReport> report = run(2);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(report.status().message(), "run_step for step 2")) << report.status();
  EXPECT_TRUE(contains(report.status().message(), "the next step is 1")) << report.status();

  report = run(1);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->step, 1);
  EXPECT_TRUE(report->holds_loss);
  EXPECT_EQ(report->owned, (nn::ParamRange{0, n}));
  EXPECT_EQ(report->slice_params, static_cast<int64_t>(n));
  EXPECT_EQ(report->samples, 8);
  EXPECT_GT(report->grad_norm_sq, 0);

  report = run(2);
  ASSERT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(report.status().message(), "while step 1 is in flight")) << report.status();
  absl::StatusOr<int64_t> applied = commit(1);
  ASSERT_EQ(applied.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(applied.status().message(), "no step is prepared")) << applied.status();
  absl::Status s = prepare(2);
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(),
                       "prepare of step 2, but its stage holds the gradients of "
                       "step 1"))
      << s;

  const std::vector<float> before = masters();
  ASSERT_TRUE(prepare(1).ok());
  applied = commit(1);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 1);
  const std::vector<float> after = masters();
  EXPECT_NE(before, after) << "the update was not applied";
  // A retried commit of the step applied succeeds and applies nothing.
  applied = commit(1);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(masters(), after);
  EXPECT_EQ(*shard_.call(&ParamShardActor::applied_updates).get(kWait), 1);

  s = discard(1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << "a committed step stays";
  EXPECT_EQ(run(1).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a committed step is never run again";

  // Step 2: run, discard, run again (a re-run), then commit.
  ASSERT_TRUE(run(2).ok());
  EXPECT_EQ(discard(3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(discard(2).ok());
  s = prepare(2);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "holds no step's gradients")) << s;
  ASSERT_TRUE(run(2).ok()) << "a discarded step can be run again";
  ASSERT_TRUE(prepare(2).ok());
  applied = commit(2);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 2);
  // A skipped step (discarded for good): the next one follows it.
  ASSERT_TRUE(run(3).ok());
  ASSERT_TRUE(discard(3).ok());
  ASSERT_TRUE(run(4).ok());
  // Gradients dropped between prepare and commit: the commit is refused.
  ASSERT_TRUE(prepare(4).ok());
  ASSERT_TRUE(discard(4).ok());
  applied = commit(4);
  EXPECT_EQ(applied.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(applied.status().message(), "were dropped after prepare"))
      << applied.status();
  EXPECT_EQ(*shard_.call(&ParamShardActor::applied_step).get(kWait), 2);
}

// A shard that holds no weights (never initialised, or restarted empty by
// its supervisor) refuses to prepare rather than write zeros into its stage.
TEST_F(StageStepsTest, AShardWithoutWeightsRefusesToPrepare) {
  auto loader = system_.spawn<DataLoaderActor>({}, loader_options(config_, "empty", 0));
  auto stage = system_.spawn<PipelineStageActor>({}, stage_options(config_, "empty"));
  auto shard = system_.spawn<ParamShardActor>({}, shard_options(config_, "empty"));
  ASSERT_TRUE(loader.ok() && stage.ok() && shard.ok());
  ASSERT_TRUE(stage->call(&PipelineStageActor::setup).get(kWait).ok());
  ASSERT_TRUE(stage->call(&PipelineStageActor::run_step, StepRequest{.step = 1}).get(kWait).ok());
  absl::Status s = shard->call(&ParamShardActor::prepare, int64_t{1}).get(kWait);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "holds no weights")) << s;
}

// A shard of part of the stage initialises, updates and reports only its
// range; the rest of the stage's parameters is another shard's.
TEST_F(StageStepsTest, AShardOwnsOnlyItsRangeOfTheStage) {
  const nn::ModelLayout layout = nn::model_layout(config_.model);
  const nn::ParamRange range{layout.block_begin(1), layout.num_params()};
  start("range", range);
  absl::StatusOr<std::unique_ptr<nn::Model>> reference = nn::create_model(config_.model);
  ASSERT_TRUE(reference.ok());
  (*reference)->init_parameters(config_.training.seed);
  std::vector<float> before = masters();
  ASSERT_EQ(before.size(), range.size());
  EXPECT_EQ(std::memcmp(before.data(), (*reference)->params() + range.begin,
                        range.size() * sizeof(float)),
            0);
  // The stage's parameters before the range are another shard's: set them here.
  std::shared_ptr<actors::StageTensors> tensors =
      actors::Handoff::find<actors::StageTensors>(actors::actor_name("range", "stage", {}));
  ASSERT_NE(tensors, nullptr);
  for (size_t i = 0; i < tensors->n; ++i) {
    if (i < range.begin) {
      EXPECT_EQ(tensors->params[i], 0.0f) << "outside the range, at " << i;
      tensors->params[i] = (*reference)->params()[i];
    }
  }
  const std::vector<float> outside(tensors->params, tensors->params + range.begin);
  ASSERT_TRUE(run(1).ok());
  ASSERT_TRUE(prepare(1).ok());
  ASSERT_TRUE(commit(1).ok());
  std::vector<float> after = masters();
  EXPECT_NE(before, after);
  EXPECT_EQ(std::vector<float>(tensors->params, tensors->params + range.begin), outside)
      << "the shard wrote outside its range";
}

TEST_F(StageStepsTest, TheControllerDrivesTheRealActorsInProcess) {
  start("controller");
  std::vector<MeshMember> members = {
      {.at = {}, .stage = stage_endpoint(stage_), .shard = shard_endpoint(shard_)}};
  absl::StatusOr<TrainerController> c =
      TrainerController::create({}, std::move(members), controller_options(config_));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<double> losses;
  for (int64_t k = 1; k <= 6; ++k) {
    absl::StatusOr<StepOutcome> out = c->step(k);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(out->applied);
    EXPECT_EQ(out->samples, 8);
    losses.push_back(out->loss);
  }
  EXPECT_LT(losses.back(), losses.front()) << "the model does not learn";
  EXPECT_EQ(*shard_.call(&ParamShardActor::applied_step).get(kWait), 6);
}

TEST(StageFactoryTest, BadOptionsFailTheSpawnWithTheReason) {
  ActorSystem system({.threads = 1});
  const TrainConfig c = small_config();
  actors::StageOptions pipeline = stage_options(c, "bad");
  pipeline.mesh.pp = 2;
  auto stage = system.spawn<PipelineStageActor>({}, pipeline);
  EXPECT_EQ(stage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(stage.status().message(), "pp 2 needs the pipe group")) << stage.status();
  pipeline.pipe_group = "bad/pipe";
  pipeline.schedule = actors::pipeline::ScheduleKind::kInterleaved;
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, pipeline).status().message(),
                       "1 model chunks a stage (virtual_stages) with schedule \"interleaved\""));
  pipeline.virtual_stages = 2;  // of 2 virtual stages: one stage
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, pipeline).status().message(),
                       "they must be at least 2 stages of 2 chunks each"));
  pipeline.schedule = actors::pipeline::ScheduleKind::kOneFOneB;
  pipeline.virtual_stages = 1;
  pipeline.gradient_sync = actors::GradientSyncKind::kZero3;
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, pipeline).status().message(),
                       "ZeRO-3 with pipeline parallelism (pp 2) is not implemented yet"));
  actors::StageOptions sliced = stage_options(c, "bad");
  sliced.mesh.tp = 2;
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, sliced).status().message(),
                       "tp 2 needs the group of its stage's slices"));
  sliced.tp_group = "bad/tp";
  sliced.gradient_sync = actors::GradientSyncKind::kZero2;
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, sliced).status().message(),
                       "ZeRO-2 with tensor parallelism (tp 2) is not implemented yet"));
  sliced.gradient_sync = actors::GradientSyncKind::kAllreduce;
  sliced.mesh.tp = 3;  // the heads do not split in three
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, sliced).status().message(),
                       "does not split over tensor-parallel size 3"));
  actors::ShardOptions sliced_shard = shard_options(c, "bad", {});
  sliced_shard.tp = 3;
  EXPECT_TRUE(contains(system.spawn<ParamShardActor>({}, sliced_shard).status().message(),
                       "does not split over tensor-parallel size 3"));
  actors::StageOptions outside = stage_options(c, "bad");
  outside.at.d = 3;
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, outside).status().message(),
                       "is not in the mesh"));
  actors::StageOptions no_batch = stage_options(c, "bad");
  no_batch.micro_batch = 0;
  EXPECT_EQ(system.spawn<PipelineStageActor>({}, no_batch).status().code(),
            absl::StatusCode::kInvalidArgument);
  actors::StageOptions sync = stage_options(c, "bad");
  sync.gradient_sync = static_cast<actors::GradientSyncKind>(9);  // decoded from a bad message
  EXPECT_TRUE(contains(system.spawn<PipelineStageActor>({}, sync).status().message(),
                       "gradient sync 9 is not allreduce or a ZeRO stage 1-3"));
  actors::ShardOptions shard = shard_options(c, "bad", {0, 1u << 30});
  auto s = system.spawn<ParamShardActor>({}, shard);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.status().message(), "does not lie inside")) << s.status();
  EXPECT_EQ(system.num_actors(), 0u);
}

// Without a partition the stages balance the parameters they own: the
// first stage holds the embeddings, so of 5 blocks over 3 stages it takes 1
// and the others 2 (the even split's 2, 2, 1 would load the first most).
TEST(StagePlanTest, StagesBalanceTheirParametersAndTheirRangesTileTheModel) {
  const nn::ModelLayout layout = nn::model_layout(nn::GPTConfig{
      .max_seq_len = 8, .vocab_size = 10, .num_layers = 5, .num_heads = 2, .channels = 4});
  const int expected[3][2] = {{0, 1}, {1, 3}, {3, 5}};
  size_t covered = 0;
  for (int p = 0; p < 3; ++p) {
    absl::StatusOr<actors::StagePlan> plan = actors::plan_stage(layout, 3, p);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->block_begin, expected[p][0]) << "stage " << p;
    EXPECT_EQ(plan->block_end, expected[p][1]) << "stage " << p;
    EXPECT_EQ(plan->params.begin, covered) << "stage " << p;
    covered = plan->params.end;
  }
  EXPECT_EQ(covered, layout.num_params());
  absl::StatusOr<actors::StagePlan> whole = actors::plan_stage(layout, 1, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(whole->first() && whole->last());
  EXPECT_EQ(whole->params, (nn::ParamRange{0, layout.num_params()}));
  EXPECT_EQ(actors::plan_stage(layout, 6, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(actors::plan_stage(layout, 2, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

size_t largest_stage(const nn::ModelLayout& layout, const std::vector<int64_t>& partition) {
  size_t largest = 0;
  for (int p = 0; p < static_cast<int>(partition.size()); ++p) {
    absl::StatusOr<actors::StagePlan> plan =
        actors::plan_stage(layout, static_cast<int>(partition.size()), p, partition);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (plan.ok()) largest = std::max(largest, plan->params.size());
  }
  return largest;
}

// balanced_partition's largest stage is the smallest any partition has
// (checked against every partition of a few shapes); it is the even split
// where that is as good, and with a large vocabulary the first stage, which
// holds the embeddings, gets a block alone.
TEST(StagePlanTest, TheBalancedPartitionHasTheSmallestLargestStage) {
  for (int vocab : {10, 40, 1000}) {
    const nn::ModelLayout layout = nn::model_layout(nn::GPTConfig{
        .max_seq_len = 8, .vocab_size = vocab, .num_layers = 6, .num_heads = 2, .channels = 4});
    for (int stages = 1; stages <= 6; ++stages) {
      const std::vector<int64_t> balanced = actors::balanced_partition(layout, stages);
      ASSERT_EQ(balanced.size(), static_cast<size_t>(stages));
      size_t best = SIZE_MAX;
      // Every partition of 6 blocks into `stages` positive parts.
      std::vector<int64_t> parts(static_cast<size_t>(stages), 1);
      std::function<void(int, int)> each = [&](int i, int left) {
        if (i + 1 == stages) {
          parts[static_cast<size_t>(i)] = left;
          best = std::min(best, largest_stage(layout, parts));
          return;
        }
        for (int k = 1; k <= left - (stages - i - 1); ++k) {
          parts[static_cast<size_t>(i)] = k;
          each(i + 1, left - k);
        }
      };
      each(0, 6);
      const std::string what = "vocab " + std::to_string(vocab) + ", " + std::to_string(stages);
      EXPECT_EQ(largest_stage(layout, balanced), best) << what;
      const std::vector<int64_t> even = actors::uniform_partition(6, stages);
      if (largest_stage(layout, even) == best) {
        EXPECT_EQ(balanced, even) << what;
      }
    }
  }
  const nn::ModelLayout wide = nn::model_layout(nn::GPTConfig{
      .max_seq_len = 8, .vocab_size = 1000, .num_layers = 5, .num_heads = 2, .channels = 4});
  EXPECT_EQ(actors::balanced_partition(wide, 2), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(actors::uniform_partition(5, 3), (std::vector<int64_t>{2, 2, 1}));
}

TEST(StagePlanTest, AGivenPartitionSetsEachStagesBlocks) {
  const nn::ModelLayout layout = nn::model_layout(nn::GPTConfig{
      .max_seq_len = 8, .vocab_size = 10, .num_layers = 5, .num_heads = 2, .channels = 4});
  const std::vector<int64_t> partition = {1, 3, 1};
  const int expected[3][2] = {{0, 1}, {1, 4}, {4, 5}};
  size_t covered = 0;
  for (int p = 0; p < 3; ++p) {
    absl::StatusOr<actors::StagePlan> plan = actors::plan_stage(layout, 3, p, partition);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->block_begin, expected[p][0]) << "stage " << p;
    EXPECT_EQ(plan->block_end, expected[p][1]) << "stage " << p;
    EXPECT_EQ(plan->params.begin, covered) << "stage " << p;
    covered = plan->params.end;
  }
  EXPECT_EQ(covered, layout.num_params());
  for (const std::vector<int64_t>& bad :
       {std::vector<int64_t>{1, 4}, std::vector<int64_t>{2, 2, 2}, std::vector<int64_t>{0, 4, 1}}) {
    EXPECT_EQ(actors::plan_stage(layout, 3, 0, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// A step whose group failed stops computing at the next block: go_on is
// asked before each one, and its error ends the pass there. Asked nothing
// but OK, the pass is the whole model's.
TEST(StagePlanTest, AStageStopsAtTheNextBlockOnceItsStepCannotSucceed) {
  const nn::ModelConfig config = nn::GPTConfig{
      .max_seq_len = 8, .vocab_size = 10, .num_layers = 4, .num_heads = 2, .channels = 8};
  absl::StatusOr<std::unique_ptr<nn::Model>> created = nn::create_model(config);
  ASSERT_TRUE(created.ok()) << created.status();
  nn::Model* gpt = created->get();
  gpt->init_parameters(7);
  absl::StatusOr<actors::StagePlan> plan = actors::plan_stage(gpt->layout(), 1, 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const int B = 2, T = 8;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    inputs[i] = i % 10;
    targets[i] = (i * 3 + 1) % 10;
  }
  absl::StatusOr<float> whole = gpt->forward(inputs.data(), targets.data(), B, T);
  ASSERT_TRUE(whole.ok()) << whole.status();

  int asked = 0;
  actors::GoOn always = [&] {
    ++asked;
    return absl::OkStatus();
  };
  absl::StatusOr<float> loss =
      actors::forward_stage(*gpt, *plan, inputs.data(), targets.data(), B, T, always);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_FLOAT_EQ(*loss, *whole);
  EXPECT_EQ(asked, config.num_layers());
  asked = 0;
  ASSERT_TRUE(actors::backward_stage(*gpt, *plan, 1.0f, nullptr, always).ok());
  EXPECT_EQ(asked, config.num_layers());

  asked = 0;
  actors::GoOn fails_at_third = [&] {
    return ++asked == 3 ? absl::AbortedError("rank 1 was lost") : absl::OkStatus();
  };
  loss = actors::forward_stage(*gpt, *plan, inputs.data(), targets.data(), B, T, fails_at_third);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(asked, 3) << "blocks after the failure were still run";
  ASSERT_TRUE(actors::forward_stage(*gpt, *plan, inputs.data(), targets.data(), B, T).ok());
  asked = 0;
  absl::Status back = actors::backward_stage(*gpt, *plan, 1.0f, nullptr, fails_at_third);
  EXPECT_EQ(back.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(asked, 3);
}

}  // namespace
}  // namespace troupe::trainers
