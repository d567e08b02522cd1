// The Llama model in the trainers, on a real local cluster (a head and three workers of the
// troupe executable): data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3, pipelines under 1F1B, GPipe and
// interleaved 1F1B, tensor parallelism and the 3-D mesh each train as one process does on the
// same global batch (fp32: losses to 1e-6, weights to 1e-6), with its own head and tied; so does
// an elastic job resized between steps (DDP and ZeRO-3); the same mesh twice under AdamW bit for
// bit; a checkpoint of (2, 2, 2) resumes at (1, 1, 1) with the next step's loss of the run that
// saved it, and `troupe generate` continues a prompt from it as the trainer did.
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
#include "tests/reference/reference_python.h"
#include "tests/trainers/training_cluster.h"
#include "text/byte_tokenizer.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

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
    for (const Layout& l :
         {Layout{2, 1, 1, 0}, Layout{2, 1, 1, 1}, Layout{2, 1, 1, 2}, Layout{3, 1, 1, 3},
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

// GPipe, and interleaved 1F1B with two chunks a stage (four virtual stages of one block each):
// the tied head's embedding then travels from the first chunk to the last one on the same stage.
TEST_F(LlamaTrainersTest, GPipeAndInterleavedOneFOneBMatchOneProcess) {
  using actors::pipeline::ScheduleKind;
  for (bool tied : {false, true}) {
    const testing::RunResult single = run(config_for(tied, 1, 1, 1));
    for (ScheduleKind kind : {ScheduleKind::kGPipe, ScheduleKind::kInterleaved}) {
      TrainConfig c = config_for(tied, 1, 2, 1);
      c.parallel.schedule = kind;
      c.parallel.virtual_stages = kind == ScheduleKind::kInterleaved ? 2 : 1;
      const std::string what = std::string(tied ? "tied" : "own head") + ", " +
                               actors::pipeline::schedule_name(kind) + " over 2 stages";
      const testing::RunResult r = run(c);
      testing::expect_same_training(r, single, what, true, "llama");
      for (const StepOutcome& o : r.outcomes)
        EXPECT_GT(o.sent.pipeline, 0) << what;
    }
  }
}

// Elasticity: a job resized between steps (dp 2 -> 3 -> 2, the middle rank leaving) trains on
// the same samples as one replica on the same global batch, under DDP and under ZeRO-3 (whose
// partitions of the Llama's tensors move peer to peer at each size).
TEST_F(LlamaTrainersTest, AnElasticJobResizedBetweenStepsTrainsAsOneThatNeverChanged) {
  auto elastic_config = [](int dp, int zero) {
    TrainConfig c = testing::elastic_sgd_config(dp, kGlobalBatch);
    c.model = llama(true);
    c.zero.stage = zero;
    return c;
  };
  const testing::RunResult single =
      testing::run_steps(*driver_, elastic_config(1, 0), next_job(), 6, kGlobalBatch);
  ASSERT_EQ(single.losses.size(), 6u);
  constexpr absl::Duration kResizeWait = absl::Seconds(60);
  for (int zero : {0, 3}) {
    const std::string what = "ZeRO-" + std::to_string(zero) + ", dp 2 -> 3 -> 2";
    absl::StatusOr<std::unique_ptr<DataParallelTrainer>> trainer =
        DataParallelTrainer::start(*driver_, elastic_config(2, zero), next_job(), 1);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    testing::RunResult elastic;
    auto train = [&](int from, int to) {
      for (int k = from; k <= to; ++k) {
        absl::StatusOr<StepOutcome> outcome = (*trainer)->step(k);
        ASSERT_TRUE(outcome.ok()) << what << ", step " << k << ": " << outcome.status();
        elastic.losses.push_back(outcome->loss);
        elastic.norms.push_back(outcome->grad_norm);
        elastic.outcomes.push_back(*outcome);
      }
    };
    train(1, 2);
    ASSERT_TRUE((*trainer)->resize({0, 1}, {-1}, absl::Now() + kResizeWait).ok()) << what;
    train(3, 4);
    ASSERT_TRUE((*trainer)->resize({0, 2}, {}, absl::Now() + kResizeWait).ok()) << what;
    train(5, 6);
    absl::StatusOr<std::vector<float>> params = (*trainer)->master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    elastic.params = *std::move(params);
    EXPECT_TRUE((*trainer)->stop().ok());
    ASSERT_EQ(elastic.outcomes.size(), single.outcomes.size());
    const int dps[6] = {2, 2, 3, 3, 2, 2};
    for (size_t k = 0; k < single.outcomes.size(); ++k) {
      EXPECT_EQ(elastic.outcomes[k].dp, dps[k]) << what << ", step " << k + 1;
      EXPECT_EQ(testing::sorted(elastic.outcomes[k].sample_ids),
                testing::sorted(single.outcomes[k].sample_ids))
          << what << ", step " << k + 1 << " trained on other samples";
    }
    testing::expect_same_training(elastic, single, what, true, "llama");
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

// `troupe generate --checkpoint` on a checkpoint a (2, 2, 2) mesh saved continues a prompt as
// the trainer did with the same weights (greedy).
TEST_F(LlamaTrainersTest, GenerateContinuesFromACheckpointAsTheTrainerDid) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("troupe-llama-generate-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  TrainConfig c = config_for(true, 2, 2, 2);
  c.checkpoint = {.dir = dir, .interval_steps = 0, .keep = 1, .async = false};
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = start_trainer(*driver_, c, next_job(), 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int k = 1; k <= 2; ++k)
    ASSERT_TRUE((*trainer)->step(k).ok());
  Checkpointer checkpoints((*trainer)->controller(),
                           job_record(c, (*trainer)->data_info().samples_per_epoch), c.checkpoint);
  const CheckpointEvent saved = checkpoints.save_now().back();
  ASSERT_TRUE(saved.status.ok()) << saved.status;
  const std::string prompt = "12+3=";
  absl::StatusOr<std::vector<int32_t>> tokens =
      (*trainer)->generate(text::ByteTokenizer::encode(prompt), 6, 0, 0);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 6u);
  EXPECT_TRUE((*trainer)->stop().ok());
  std::string expected = prompt + text::ByteTokenizer::decode(*tokens);
  if (expected.back() == '\n') expected.pop_back();  // as the command prints it
  const troupe::testing::Shell generated =
      troupe::testing::shell("('" TROUPE_BINARY "' generate --checkpoint '" + dir + "' --prompt '" +
                             prompt + "' --max-tokens 6 --no-stop 2>/dev/null)");
  ASSERT_EQ(generated.code, 0) << generated.output;
  EXPECT_EQ(generated.output, expected + "\n");
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
