// The Llama model in the trainers, on a real local cluster (a head and three workers of the
// troupe executable): data parallelism, ZeRO-1 and ZeRO-3, a pipeline under 1F1B, tensor
// parallelism and the 3-D mesh each train as one process does on the same global batch (fp32:
// losses to 1e-6, weights to 1e-6), with its own head and tied; the same mesh twice under AdamW
// bit for bit; a checkpoint of (2, 2, 2) resumes at (1, 1, 1) with the next step's loss of the
// run that saved it.
//
// Across meshes the optimizer is SGD with momentum, as in the GPT's pipeline tests: the meshes
// sum gradients in another order, and AdamW's first steps (g / sqrt(g^2)) turn the rounding of
// the gradients that nearly cancel into whole steps of the learning rate.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>
#include <tuple>

#include "checkpoint/safetensors.h"
#include "core/io/env.h"
#include "nn/model/hf.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/config.h"

namespace troupe::trainers {
namespace {

constexpr int kSteps = 3;
constexpr int kMicroBatch = 2;
constexpr int kGlobalBatch = 12;  // 6 micro-batches a step: over dp 1, 2 or 3

// Four blocks (a pipeline of 2 holds two each), 4 heads over 2 KV heads (2 tensor-parallel
// slices hold one KV head each).
nn::ModelConfig llama(bool tied) {
  return nn::LlamaConfig{.vocab_size = 64,
                         .hidden_size = 32,
                         .intermediate_size = 48,
                         .num_hidden_layers = 4,
                         .num_attention_heads = 4,
                         .num_key_value_heads = 2,
                         .max_position_embeddings = 18,
                         .rms_norm_eps = 1e-5,
                         .rope_theta = 10000.0,
                         .tie_word_embeddings = tied,
                         .padded_vocab_size = 64};
}

TrainConfig config_for(bool tied, int dp, int pp, int tp, int zero = 0,
                       OptimizerType optimizer = OptimizerType::kSgd) {
  TrainConfig c;
  c.parallel.dp = dp;
  c.parallel.pp = pp;
  c.parallel.tp = tp;
  c.parallel.schedule = actors::pipeline::ScheduleKind::kOneFOneB;
  c.micro_batch_size = kMicroBatch;
  c.gradient_accumulation_steps = kGlobalBatch / kMicroBatch / dp;
  c.train_batch_size = kGlobalBatch;
  c.model = llama(tied);
  testing::train_addition(c, optimizer);
  c.zero.stage = zero;
  c.zero.reduce_bucket_size = 6000;
  c.zero.stage3_param_persistence_threshold = 40;
  c.zero.stage3_prefetch_bucket_size = 8000;
  c.training.seed = 17;
  return c;
}

class LlamaTrainersTest : public testing::TrainingClusterTest {
 protected:
  // A stage's tp slices share a bundle of tp CPUs on one worker.
  static void SetUpTestSuite() { start_cluster("CPU=4"); }

  static std::string next_job() { return "llama-test-" + std::to_string(++jobs_); }

  testing::RunResult run(const TrainConfig& config) {
    return testing::run_steps(*driver_, config, next_job(), kSteps, kGlobalBatch);
  }

  inline static int jobs_ = 0;
};

TEST_F(LlamaTrainersTest, EveryTrainerAndMeshMatchesOneProcess) {
  for (bool tied : {false, true}) {
    const testing::RunResult single = run(config_for(tied, 1, 1, 1));
    ASSERT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
    // The loss falls: the model learns, it does not only agree.
    EXPECT_LT(single.losses.back(), single.losses.front());
    struct Layout {
      int dp, pp, tp, zero;
    };
    for (const Layout& l : {Layout{2, 1, 1, 0}, Layout{2, 1, 1, 1}, Layout{3, 1, 1, 3},
                            Layout{1, 2, 1, 0}, Layout{1, 1, 2, 0}, Layout{2, 2, 2, 0}}) {
      const std::string what = std::string(tied ? "tied" : "own head") + ", dp " +
                               std::to_string(l.dp) + " x pp " + std::to_string(l.pp) + " x tp " +
                               std::to_string(l.tp) + ", ZeRO-" + std::to_string(l.zero);
      const testing::RunResult r = run(config_for(tied, l.dp, l.pp, l.tp, l.zero));
      testing::expect_same_training(r, single, what, true, "llama");
      for (const StepOutcome& o : r.outcomes) {
        EXPECT_EQ(o.sent.pipeline > 0, l.pp > 1) << what;
        EXPECT_EQ(o.sent.tensor_parallel > 0, l.tp > 1) << what;
      }
    }
  }
}

TEST_F(LlamaTrainersTest, TheSameMeshUnderAdamWTwiceIsBitwiseTheSame) {
  for (bool tied : {false, true}) {
    const TrainConfig c = config_for(tied, 2, 2, 2, 1, OptimizerType::kAdamW);
    const testing::RunResult a = run(c);
    const testing::RunResult b = run(c);
    ASSERT_FALSE(a.params.empty());
    EXPECT_EQ(a.losses, b.losses) << (tied ? "tied" : "own head");
    EXPECT_EQ(a.params, b.params) << (tied ? "tied" : "own head");
  }
}

TEST_F(LlamaTrainersTest, ACheckpointOf222ResumesAt111WithTheNextStepsLoss) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("troupe-llama-ckpt-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  auto with_checkpoints = [&](int dp, int pp, int tp) {
    TrainConfig c = config_for(false, dp, pp, tp, 0, OptimizerType::kAdamW);
    c.checkpoint = {.dir = dir, .interval_steps = 0, .keep = 3, .async = true};
    return c;
  };
  const TrainConfig mesh = with_checkpoints(2, 2, 2);
  const testing::RunResult whole = testing::run_checkpointed(*driver_, mesh, next_job(), 1, 3);
  const testing::RunResult first = testing::run_checkpointed(*driver_, mesh, next_job(), 1, 2, {2});
  ASSERT_EQ(whole.losses.size(), 3u);
  ASSERT_EQ(first.losses.size(), 2u);
  EXPECT_EQ(first.losses[1], whole.losses[1]);
  const testing::RunResult resumed =
      testing::run_checkpointed(*driver_, with_checkpoints(1, 1, 1), next_job(), 3, 3, {}, true);
  ASSERT_EQ(resumed.losses.size(), 1u);
  EXPECT_NEAR(resumed.losses[0], whole.losses[2], 1e-6 * whole.losses[2]);
  std::filesystem::remove_all(dir);
}

// training.init_from: every shard of a mesh starts from the pretrained weights (here a Hugging
// Face directory as transformers would load it), not from the seed; both meshes then train as
// one.
TEST_F(LlamaTrainersTest, InitFromStartsEveryMeshFromThoseWeights) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("troupe-llama-pretrained-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const nn::ModelConfig model = llama(false);
  std::vector<float> pretrained(nn::model_layout(model).num_params());
  nn::init_parameters(model, {}, 99, 0, pretrained.size(), pretrained.data());
  ASSERT_TRUE(checkpoint::write_safetensors(io::Env::posix(), dir + "/model.safetensors",
                                            nn::hf_tensors(model, pretrained.data()), {})
                  .ok());
  const std::string config_json = nn::hf_config_json(model).dump(2);
  ASSERT_TRUE(io::write_file_atomically(io::Env::posix(), dir + "/config.json", config_json.data(),
                                        config_json.size())
                  .ok());
  std::vector<double> first_losses;
  for (auto [dp, pp, tp] : {std::tuple{1, 1, 1}, std::tuple{2, 2, 2}}) {
    TrainConfig c = config_for(false, dp, pp, tp);
    c.training.init_from = dir;
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = start_trainer(*driver_, c, next_job(), 1);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    absl::StatusOr<std::vector<float>> params = (*trainer)->master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    EXPECT_EQ(*params, pretrained) << dp << " x " << pp << " x " << tp;
    absl::StatusOr<StepOutcome> step = (*trainer)->step(1);
    ASSERT_TRUE(step.ok()) << step.status();
    first_losses.push_back(step->loss);
    EXPECT_TRUE((*trainer)->stop().ok());
  }
  EXPECT_NEAR(first_losses[1], first_losses[0], 1e-6 * first_losses[0]);
  const testing::RunResult seeded = run(config_for(false, 1, 1, 1));
  ASSERT_FALSE(seeded.losses.empty());
  EXPECT_NE(seeded.losses[0], first_losses[0]) << "init_from changed nothing";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::trainers
