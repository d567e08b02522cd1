// Pipeline and tensor parallelism (HybridTrainer, parallel.pp or tp > 1) on
// a real local cluster (a head and three worker processes of the troupe
// executable): splitting the model into stages that pass activations and
// gradients peer to peer, and into tensor-parallel slices that sum over
// their group, must not change the math. Every layout dp x pp x tp and
// schedule gives the losses and weights of one process on the same global
// batch (fp32, relative 1e-6); identical runs are bitwise identical; a
// checkpoint of one mesh resumes it bitwise and loads into another.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "actors/pipeline/schedule.h"
#include "actors/stage_plan.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/hybrid_trainer.h"
#include "transport/connection.h"

namespace troupe::trainers {
namespace {

constexpr int kSteps = 4;
constexpr int kMicroBatch = 2;
constexpr int kGlobalBatch = 16;  // micro-batches of 2: 8 a step over dp

// A small GPT of 4 blocks, so that 4 stages hold one each, and of 4 heads,
// so that 4 tensor-parallel slices hold one each.
nn::ModelConfig model() {
  return nn::GPTConfig{.max_seq_len = 18,
                       .vocab_size = 64,
                       .padded_vocab_size = 64,
                       .num_layers = 4,
                       .num_heads = 4,
                       .channels = 32};
}

TrainConfig config_for(int dp, int pp, const std::string& schedule = "1f1b",
                       OptimizerType optimizer = OptimizerType::kSgd, int tp = 1) {
  TrainConfig c;
  c.parallel.dp = dp;
  c.parallel.pp = pp;
  c.parallel.tp = tp;
  c.parallel.schedule = *actors::pipeline::parse_schedule(schedule);
  c.parallel.virtual_stages = schedule == "interleaved" ? 2 : 1;
  c.micro_batch_size = kMicroBatch;
  c.gradient_accumulation_steps = kGlobalBatch / kMicroBatch / dp;  // micro-batches a step
  c.train_batch_size = kGlobalBatch;
  c.model = model();
  testing::train_addition(c, optimizer);
  c.zero.reduce_bucket_size = 8000;
  c.training.seed = 11;
  return c;
}

using testing::RunResult;

// Each stage's timeline is its schedule's program as it ran, op by op, in
// time order; the step's bubble is an idle share.
// Under interleaved 1F1B each of a stage's 2 chunks is a virtual stage with a
// timeline of its own: its ops of the stage's program.
void expect_timelines(const StepOutcome& o, int dp, int pp, int tp, const std::string& schedule) {
  const int v = schedule == "interleaved" ? 2 : 1;
  ASSERT_EQ(o.timelines.size(), static_cast<size_t>(dp * pp * v * tp)) << "step " << o.step;
  absl::StatusOr<actors::pipeline::Schedule> s = actors::pipeline::make_schedule(
      *actors::pipeline::parse_schedule(schedule), pp, kGlobalBatch / kMicroBatch / dp, v);
  ASSERT_TRUE(s.ok()) << s.status();
  for (const StageTimeline& t : o.timelines) {
    const std::vector<actors::pipeline::PipelineOp> program =
        actors::pipeline::chunk_program(*s, t.at.p % pp, t.at.p / pp).ops;
    ASSERT_EQ(t.events.size(), program.size()) << actors::to_string(t.at);
    double before = 0;
    for (size_t i = 0; i < program.size(); ++i) {
      EXPECT_EQ(t.events[i].kind, static_cast<int32_t>(program[i].kind));
      EXPECT_EQ(t.events[i].micro, program[i].micro);
      EXPECT_LE(before, t.events[i].begin_ms);
      EXPECT_LE(t.events[i].begin_ms, t.events[i].end_ms);
      before = t.events[i].end_ms;
    }
    EXPECT_LE(before, t.schedule_ms);
  }
  EXPECT_GT(o.bubble, 0) << "step " << o.step;
  EXPECT_LT(o.bubble, 1) << "step " << o.step;
}

// An interleaved stage's chunks took turns: on their process's clock, each op
// of the stage's program began after the op before it ended, whichever chunk
// ran each.
void expect_turns_taken(const StepOutcome& o, int pp, int v, int m) {
  absl::StatusOr<actors::pipeline::Schedule> s =
      actors::pipeline::make_schedule(actors::pipeline::ScheduleKind::kInterleaved, pp, m, v);
  ASSERT_TRUE(s.ok()) << s.status();
  std::map<std::tuple<int, int, int>, const StageTimeline*> by_coordinate;
  for (const StageTimeline& t : o.timelines)
    by_coordinate[{t.at.d, t.at.p, t.at.t}] = &t;
  for (const StageTimeline& first : o.timelines) {
    if (first.at.p >= pp) continue;  // one pass a stage: from its chunk 0
    const int stage = first.at.p;
    std::vector<size_t> next(static_cast<size_t>(v), 0);  // each chunk's next event
    double ended = -1e300;
    std::string where;
    for (const actors::pipeline::PipelineOp& op : s->programs[static_cast<size_t>(stage)]) {
      const StageTimeline* t = by_coordinate[{first.at.d, op.chunk * pp + stage, first.at.t}];
      ASSERT_NE(t, nullptr);
      const actors::TimelineEvent& e = t->events[next[static_cast<size_t>(op.chunk)]++];
      EXPECT_GE(t->began_ms + e.begin_ms, ended - 1e-3)
          << "step " << o.step << ", stage " << stage << ": "
          << actors::pipeline::to_string(op, true) << " began before " << where << " ended";
      ended = t->began_ms + e.end_ms;
      where = actors::pipeline::to_string(op, true);
    }
  }
}

class PipelineTest : public testing::TrainingClusterTest {
 protected:
  // A stage's tp slices share a bundle of tp CPUs on one worker: up to 4.
  static void SetUpTestSuite() { start_cluster("CPU=4"); }

  static std::string next_job() { return "pipeline-test-" + std::to_string(++jobs_); }

  RunResult run(const TrainConfig& config) {
    return testing::run_steps(*driver_, config, next_job(), kSteps, kGlobalBatch);
  }

  inline static int jobs_ = 0;
};

TEST_F(PipelineTest, EveryLayoutAndScheduleMatchesOneProcess) {
  const RunResult single = run(config_for(1, 1));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  struct Layout {
    int dp, pp, tp;
  };
  // Every layout of {1, 2}^3 but (1, 1, 1), and (1, 4, 1), (1, 1, 4); (2, 1, 1) runs on the
  // data-parallel trainer, the others on the hybrid one.
  for (const Layout& l :
       {Layout{1, 2, 1}, Layout{2, 2, 1}, Layout{1, 4, 1}, Layout{1, 1, 2}, Layout{2, 1, 2},
        Layout{1, 2, 2}, Layout{2, 2, 2}, Layout{1, 1, 4}, Layout{2, 1, 1}}) {
    // Without a pipeline there is no schedule to vary.
    const std::vector<std::string> schedules =
        l.pp > 1 ? std::vector<std::string>{"gpipe", "1f1b"} : std::vector<std::string>{"1f1b"};
    for (const std::string& schedule : schedules) {
      const std::string what = "dp " + std::to_string(l.dp) + " x pp " + std::to_string(l.pp) +
                               " x tp " + std::to_string(l.tp) + ", " + schedule;
      const RunResult piped = run(config_for(l.dp, l.pp, schedule, OptimizerType::kSgd, l.tp));
      testing::expect_same_training(piped, single, what, true, "pipeline");
      for (size_t k = 0; k < piped.outcomes.size(); ++k) {
        const StepOutcome& o = piped.outcomes[k];
        EXPECT_EQ(testing::sorted(o.sample_ids), testing::sorted(single.outcomes[k].sample_ids))
            << what << ", step " << k + 1;
        if (l.pp > 1) expect_timelines(o, l.dp, l.pp, l.tp, schedule);
        // Each kind of group's traffic is counted: the activations and their
        // gradients, the slices' all-reduces, the gradients' average.
        EXPECT_EQ(o.sent.pipeline > 0, l.pp > 1) << what;
        EXPECT_EQ(o.sent.tensor_parallel > 0, l.tp > 1) << what;
        EXPECT_EQ(o.sent.allreduce > 0, l.dp > 1) << what;
      }
    }
  }
}

// Interleaved 1F1B: each stage holds 2 chunks of one block (virtual stages
// 0 .. 3, chunk c of stage s being virtual stage 2 c + s), which take turns
// in the order of their stage's program. The same math as one process, and
// bitwise repeatable.
TEST_F(PipelineTest, InterleavedOneFOneBMatchesOneProcess) {
  const RunResult single = run(config_for(1, 1));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  for (auto [dp, tp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    const std::string what =
        "dp " + std::to_string(dp) + " x pp 2 (2 chunks each) x tp " + std::to_string(tp);
    const RunResult piped = run(config_for(dp, 2, "interleaved", OptimizerType::kSgd, tp));
    testing::expect_same_training(piped, single, what, true, "pipeline");
    for (const StepOutcome& o : piped.outcomes) {
      expect_timelines(o, dp, 2, tp, "interleaved");
      expect_turns_taken(o, 2, 2, kGlobalBatch / kMicroBatch / dp);
      EXPECT_GT(o.sent.pipeline, 0) << what;
    }
    if (dp == 2 && tp == 2) {
      const RunResult again = run(config_for(dp, 2, "interleaved", OptimizerType::kSgd, tp));
      ASSERT_FALSE(again.params.empty()) << what;
      EXPECT_EQ(again.losses, piped.losses) << what << ": run again";
      EXPECT_EQ(again.params, piped.params) << what << ": run again";
    }
  }
}

// Interleaved 1F1B over 4 stages of 2 chunks (a model of 8 blocks: 8
// virtual stages of one), and under ZeRO-1 over dp 2 (each virtual stage's
// range partitioned over its replicas): the same math as one process.
TEST_F(PipelineTest, InterleavedOverFourStagesAndUnderZero1MatchesOneProcess) {
  TrainConfig single_config = config_for(1, 1);
  single_config.model.gpt2()->num_layers = 8;
  const RunResult single = run(single_config);
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  TrainConfig four = config_for(1, 4, "interleaved");
  four.model.gpt2()->num_layers = 8;
  const RunResult piped = run(four);
  testing::expect_same_training(piped, single, "dp 1 x pp 4 (2 chunks each)", true, "pipeline");
  for (const StepOutcome& o : piped.outcomes) {
    expect_timelines(o, 1, 4, 1, "interleaved");
    expect_turns_taken(o, 4, 2, kGlobalBatch / kMicroBatch);
  }
  const RunResult single4 = run(config_for(1, 1));
  TrainConfig zero1 = config_for(2, 2, "interleaved");
  zero1.zero.stage = 1;
  const RunResult partitioned = run(zero1);
  testing::expect_same_training(partitioned, single4, "dp 2 x pp 2 (2 chunks each), ZeRO-1", true,
                                "pipeline");
}

// ZeRO-1 over dp with pipeline and tensor parallelism (Megatron's
// distributed optimizer): each replica's shard owns a partition of its
// stage's range; the gradients are reduce-scattered to them and the
// parameters gathered back. The same math as one process, and as repeatable.
TEST_F(PipelineTest, Zero1OverDpWithModelParallelismMatchesOneProcess) {
  const RunResult single = run(config_for(1, 1));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  for (auto [pp, tp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    const std::string what =
        "ZeRO-1 over dp 2 x pp " + std::to_string(pp) + " x tp " + std::to_string(tp);
    // SGD with momentum: its state partitioned, and no AdamW to magnify the
    // reductions' rounding beyond 1e-6.
    TrainConfig c = config_for(2, pp, "1f1b", OptimizerType::kSgd, tp);
    c.zero.stage = 1;
    c.zero.reduce_bucket_size = 3000;  // buckets that cut tensors, partitions too
    testing::expect_same_training(run(c), single, what, true, "pipeline");
    // AdamW, twice: bit for bit.
    c.optimizer.type = OptimizerType::kAdamW;
    c.lr_schedule = nn::LrSchedule::constant(3e-3f);
    const RunResult a = run(c);
    const RunResult b = run(c);
    ASSERT_FALSE(a.params.empty()) << what;
    EXPECT_EQ(a.losses, b.losses) << what;
    EXPECT_EQ(a.params, b.params) << what;
  }
}

// A pipeline stage holds the parameters and gradients of its range alone
// (the last one a copy of wte besides, for the tied head), and under ZeRO-1
// its shard the optimizer state of a dp-th of that: the largest stage's, not
// the whole model's.
TEST_F(PipelineTest, AStageHoldsItsShareOfTheModel) {
  for (auto [dp, pp, tp, zero] : {std::tuple{1, 4, 1, 0}, std::tuple{2, 2, 2, 1}}) {
    TrainConfig c = config_for(dp, pp, "1f1b", OptimizerType::kAdamW, tp);
    c.zero.stage = zero;
    const RunResult r = run(c);
    ASSERT_FALSE(r.outcomes.empty());
    const nn::ModelLayout layout = nn::model_layout(model(), {.rank = 0, .size = tp});
    int64_t largest = 0, largest_owned = 0;
    for (int p = 0; p < pp; ++p) {
      absl::StatusOr<actors::StagePlan> plan = actors::plan_stage(layout, pp, p);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const auto range = static_cast<int64_t>(plan->params.size());
      const int64_t wte = plan->last() && !plan->first() && layout.tied_head()
                              ? static_cast<int64_t>(layout.token_embedding().size())
                              : 0;
      largest = std::max(largest, range + wte);
      largest_owned = std::max(largest_owned, (range + dp - 1) / dp);
    }
    const std::string what = "dp " + std::to_string(dp) + " x pp " + std::to_string(pp) + " x tp " +
                             std::to_string(tp) + ", ZeRO-" + std::to_string(zero);
    const actors::MemoryReport& m = r.outcomes.back().memory;
    EXPECT_EQ(m.parameters, largest * 4) << what;
    EXPECT_EQ(m.gradients, largest * 4) << what;
    // AdamW: two moments of what the shard owns (ZeRO-1: a partition).
    EXPECT_LE(m.optimizer_state, 2 * largest_owned * 4) << what;
    EXPECT_LT(m.parameters, static_cast<int64_t>(layout.num_params()) * 4) << what;
  }
}

TEST_F(PipelineTest, AGivenPartitionMatchesOneProcess) {
  const RunResult single = run(config_for(1, 1));
  TrainConfig c = config_for(1, 2);
  c.parallel.partition = {1, 3};
  testing::expect_same_training(run(c), single, "pp 2, partition [1, 3]", true, "pipeline");
}

// Activations above UCX's eager size (96 KiB a micro-batch here) cross
// between the stages without a copy: sends lend the stage's memory, and a
// receive posted before its message (a stage waiting on its neighbour) has it
// land in the slot or the gradient scratch. Where the cluster runs over UCX
// some bytes land in place each run; the math stays one process's either way.
TEST_F(PipelineTest, LargeActivationsCrossWithoutACopyAndKeepTheMath) {
  auto larger = [](int pp, const std::string& schedule) {
    TrainConfig c = config_for(1, pp, schedule);
    c.model.gpt2()->max_seq_len = 64;
    c.model.gpt2()->channels = 192;
    return c;
  };
  const RunResult single = run(larger(1, "1f1b"));
  ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
  const bool ucx = transport::make_transport("ucx", {.token = "probe"}).ok();
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const RunResult piped = run(larger(2, schedule));
    testing::expect_same_training(piped, single, std::string("pp 2, ") + schedule, true,
                                  "pipeline");
    int64_t in_place = 0, sent = 0;
    for (const StepOutcome& o : piped.outcomes) {
      EXPECT_GT(o.sent.pipeline, 0) << schedule;
      EXPECT_LE(o.sent.pipeline_received_in_place, o.sent.pipeline) << schedule;
      in_place += o.sent.pipeline_received_in_place;
      sent += o.sent.pipeline;
    }
    std::printf("[ pipeline ] pp 2, %s: %lld of %lld bytes received in place\n", schedule,
                static_cast<long long>(in_place), static_cast<long long>(sent));
    if (ucx) {
      EXPECT_GT(in_place, 0) << schedule << ": nothing landed in place over UCX";
    } else {
      EXPECT_EQ(in_place, 0) << schedule << ": TCP places nothing";
    }
  }
}

TEST_F(PipelineTest, IdenticalRunsAreBitwiseIdentical) {
  for (int tp : {1, 2}) {
    const TrainConfig c = config_for(2, 2, "1f1b", OptimizerType::kAdamW, tp);
    const RunResult a = run(c);
    const RunResult b = run(c);
    ASSERT_FALSE(a.params.empty()) << "tp " << tp;
    EXPECT_EQ(a.losses, b.losses) << "tp " << tp;
    EXPECT_EQ(a.params, b.params) << "tp " << tp;
  }
}

// A checkpoint of a mesh (2, 2, 2) - every owner's range of its slice -
// resumes that mesh bit for bit, and loads into (1, 1, 1), (2, 1, 2) and
// (2, 2, 2) under ZeRO-1
// with the next step's loss of the run that saved it (fp32: the reductions'
// order differs, so 1e-6).
TEST_F(PipelineTest, ACheckpointOf222ResumesBitwiseAndLoadsIntoOtherMeshes) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("troupe-pipeline-ckpt-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  auto with_checkpoints = [&](int dp, int pp, int tp) {
    TrainConfig c = config_for(dp, pp, "1f1b", OptimizerType::kAdamW, tp);
    c.checkpoint = {.dir = dir, .interval_steps = 0, .keep = 3, .async = true};
    return c;
  };
  const TrainConfig mesh = with_checkpoints(2, 2, 2);
  const RunResult whole = testing::run_checkpointed(*driver_, mesh, next_job(), 1, 4);
  const RunResult first = testing::run_checkpointed(*driver_, mesh, next_job(), 1, 2, {2});
  const RunResult second = testing::run_checkpointed(*driver_, mesh, next_job(), 3, 4, {}, true);
  ASSERT_EQ(whole.losses.size(), 4u);
  ASSERT_EQ(first.losses.size(), 2u);
  ASSERT_EQ(second.losses.size(), 2u);
  EXPECT_EQ(first.losses[1], whole.losses[1]);
  EXPECT_EQ(second.losses[0], whole.losses[2]);
  EXPECT_EQ(second.losses[1], whole.losses[3]);
  EXPECT_EQ(second.norms[1], whole.norms[3]);
  EXPECT_EQ(second.params, whole.params) << "the weights after step 4 differ";
  // (2, 2, 2) under ZeRO-1 too: each shard reads its partition.
  for (auto [dp, pp, tp, zero] :
       {std::tuple{1, 1, 1, 0}, std::tuple{2, 1, 2, 0}, std::tuple{2, 2, 2, 1}}) {
    TrainConfig c = with_checkpoints(dp, pp, tp);
    c.zero.stage = zero;
    const RunResult resharded = testing::run_checkpointed(*driver_, c, next_job(), 3, 3, {}, true);
    ASSERT_EQ(resharded.losses.size(), 1u) << dp << " x " << pp << " x " << tp;
    EXPECT_NEAR(resharded.losses[0], whole.losses[2], 1e-6 * whole.losses[2])
        << "(2, 2, 2) loaded at (" << dp << ", " << pp << ", " << tp << "), ZeRO-" << zero;
  }
  std::filesystem::remove_all(dir);
}

// The trainer evaluates and generates with the whole model it gathers from
// the stages' shards, as one process would with the same weights.
TEST_F(PipelineTest, EvaluationAndGenerationUseTheWholeModel) {
  absl::StatusOr<std::unique_ptr<Trainer>> piped =
      start_trainer(*driver_, config_for(1, 2, "1f1b", OptimizerType::kSgd, 2), next_job(), 1);
  ASSERT_TRUE(piped.ok()) << piped.status();
  absl::StatusOr<std::unique_ptr<Trainer>> single =
      start_trainer(*driver_, config_for(1, 1), next_job(), 1);
  ASSERT_TRUE(single.ok()) << single.status();
  for (int k = 1; k <= 2; ++k) {
    ASSERT_TRUE((*piped)->step(k).ok());
    ASSERT_TRUE((*single)->step(k).ok());
  }
  absl::StatusOr<actors::EvalReport> a = (*piped)->evaluate(20);
  absl::StatusOr<actors::EvalReport> b = (*single)->evaluate(20);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->total, 20);
  EXPECT_EQ(a->total, b->total);
  absl::StatusOr<std::vector<int32_t>> ga = (*piped)->generate({'1', '+', '2', '='}, 4, 0, 0);
  ASSERT_TRUE(ga.ok()) << ga.status();
  EXPECT_EQ(ga->size(), 4u);
  EXPECT_NE((*piped)->describe().find("pipeline of 2 stages"), std::string::npos)
      << (*piped)->describe();
  EXPECT_NE((*piped)->describe().find("tensor parallelism over 2 slices"), std::string::npos)
      << (*piped)->describe();
}

}  // namespace
}  // namespace troupe::trainers
