// Text generation (actors/generation.h) and its sampler (actors/sampling.h): top-k and top-p keep
// the tokens they promise and reduce to greedy at their narrowest; a seed gives the same tokens;
// greedy decoding gives the same tokens with the KV cache as without it, for GPT-2 and Llama, also
// once the context outgrows the model's max sequence length; stop tokens end their rows; bad
// options are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "actors/generation.h"
#include "actors/sampling.h"
#include "nn/model/config.h"
#include "nn/model/model.h"

namespace troupe::actors {
namespace {

nn::ModelConfig gpt_config() {
  nn::GPTConfig c;
  c.max_seq_len = 32;
  c.vocab_size = 50;
  c.padded_vocab_size = 64;
  c.num_layers = 2;
  c.num_heads = 2;
  c.channels = 32;
  return c;
}

nn::ModelConfig llama_config() {
  nn::LlamaConfig c{.vocab_size = 50,
                    .hidden_size = 32,
                    .intermediate_size = 64,
                    .num_hidden_layers = 2,
                    .num_attention_heads = 4,
                    .num_key_value_heads = 2,
                    .max_position_embeddings = 32,
                    .rms_norm_eps = 1e-5,
                    .rope_theta = 10000.0,
                    .tie_word_embeddings = false,
                    .padded_vocab_size = 64};
  return c;
}

// Weights 5x the initialisation's: peaked logits, no near-ties for greedy to trip on.
std::unique_ptr<nn::Model> make_model(const nn::ModelConfig& config) {
  std::unique_ptr<nn::Model> model = *nn::create_model(config);
  model->init_parameters(7);
  for (size_t i = 0; i < model->num_params(); ++i)
    model->params()[i] *= 5.0f;
  return model;
}

std::vector<std::vector<int32_t>> prompts(int B, int T) {
  std::vector<std::vector<int32_t>> out(B);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t)
      out[b].push_back((t * 17 + b * 5 + 3) % 50);
  }
  return out;
}

std::vector<std::vector<int32_t>> generate(nn::Model& model,
                                           const std::vector<std::vector<int32_t>>& p,
                                           const GenerateOptions& options) {
  absl::StatusOr<std::vector<std::vector<int32_t>>> out = generate_tokens(model, p, options);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<std::vector<int32_t>>{};
}

class GenerationTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<nn::Model> model() const {
    return make_model(GetParam() ? llama_config() : gpt_config());
  }
};

TEST_P(GenerationTest, GreedyIsTheSameWithAndWithoutTheCache) {
  std::unique_ptr<nn::Model> m = model();
  // 40 tokens after 6: all within max_seq_len = 32 at first, then past it (the window slides).
  for (int prompt_length : {6, 31, 40}) {
    const auto p = prompts(2, prompt_length);
    const auto cached = generate(*m, p, {.max_new_tokens = 40});
    const auto uncached = generate(*m, p, {.max_new_tokens = 40, .use_kv_cache = false});
    EXPECT_EQ(cached, uncached) << "prompt of " << prompt_length;
    ASSERT_EQ(cached.size(), 2u);
    EXPECT_EQ(cached[0].size(), 40u);
  }
}

TEST_P(GenerationTest, TheNarrowestTopKAndTopPAreGreedy) {
  std::unique_ptr<nn::Model> m = model();
  const auto p = prompts(2, 5);
  const auto greedy = generate(*m, p, {.max_new_tokens = 20});
  for (uint64_t seed : {1, 2, 3}) {
    EXPECT_EQ(
        generate(*m, p, {.max_new_tokens = 20, .temperature = 1.0f, .top_k = 1, .seed = seed}),
        greedy);
    EXPECT_EQ(
        generate(*m, p, {.max_new_tokens = 20, .temperature = 1.0f, .top_p = 1e-6f, .seed = seed}),
        greedy);
  }
}

TEST_P(GenerationTest, ASeedGivesTheSameTokens) {
  std::unique_ptr<nn::Model> m = model();
  const auto p = prompts(1, 4);
  const GenerateOptions options{
      .max_new_tokens = 30, .temperature = 2.0f, .top_k = 20, .top_p = 0.95f, .seed = 42};
  EXPECT_EQ(generate(*m, p, options), generate(*m, p, options));
  GenerateOptions other = options;
  other.seed = 43;
  EXPECT_NE(generate(*m, p, options), generate(*m, p, other));
}

TEST_P(GenerationTest, AStopTokenEndsItsRow) {
  std::unique_ptr<nn::Model> m = model();
  const auto p = prompts(2, 5);
  const auto free = generate(*m, p, {.max_new_tokens = 12});
  const int32_t stop = free[0][3];
  for (bool cache : {true, false}) {
    const auto out =
        generate(*m, p, {.max_new_tokens = 12, .stop_token = stop, .use_kv_cache = cache});
    const auto at = std::find(free[0].begin(), free[0].end(), stop);
    EXPECT_EQ(out[0], std::vector<int32_t>(free[0].begin(), at + 1));
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GenerationTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "llama" : "gpt2";
                         });

TEST(GenerationOptionsTest, BadSamplingOptionsAreRefused) {
  std::unique_ptr<nn::Model> m = make_model(gpt_config());
  const auto p = prompts(1, 3);
  for (const GenerateOptions& bad : {GenerateOptions{.top_k = -1}, GenerateOptions{.top_p = 0.0f},
                                     GenerateOptions{.top_p = 1.5f}, GenerateOptions{.top_p = NAN},
                                     GenerateOptions{.temperature = -1.0f}}) {
    EXPECT_EQ(generate_tokens(*m, p, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// Logits of a known shape: token i has logit -0.1 i (token 0 the likeliest).
std::vector<float> falling_logits(int V) {
  std::vector<float> logits;
  for (int i = 0; i < V; ++i)
    logits.push_back(-0.1f * static_cast<float>(i));
  return logits;
}

TEST(SamplingTest, TopKDrawsOnlyTheKLikeliest) {
  std::vector<float> logits = falling_logits(100);
  std::swap(logits[3], logits[90]);  // the likeliest are 0, 1, 2, 90, 4 ...
  uint64_t rng = 5;
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i)
    seen.insert(sample_token(logits.data(), 100, {.temperature = 1.0f, .top_k = 5}, rng));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2, 4, 90}));
}

TEST(SamplingTest, TopPDrawsOnlyTheNucleus) {
  // Probabilities 0.5, 0.25, 0.125, ...: top_p 0.7 keeps the first two (0.5 < 0.7 <= 0.75).
  std::vector<float> logits;
  for (int i = 0; i < 20; ++i)
    logits.push_back(-static_cast<float>(i) * std::log(2.0f));
  uint64_t rng = 9;
  std::set<int32_t> seen;
  for (int i = 0; i < 2000; ++i)
    seen.insert(sample_token(logits.data(), 20, {.temperature = 1.0f, .top_p = 0.7f}, rng));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  // Renormalised over the top 10 the first two hold 0.7507 of the mass: top_p 0.76 keeps three.
  seen.clear();
  for (int i = 0; i < 2000; ++i) {
    seen.insert(
        sample_token(logits.data(), 20, {.temperature = 1.0f, .top_k = 10, .top_p = 0.76f}, rng));
  }
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(SamplingTest, GreedyIgnoresTopKAndTopPAndTakesTheFirstLargest) {
  std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f};
  uint64_t rng = 1;
  EXPECT_EQ(sample_token(logits.data(), 4, {.top_k = 3, .top_p = 0.2f}, rng), 1);
  EXPECT_EQ(rng, 1u);  // no draw
  // top_k = 1 with ties: the smaller id.
  EXPECT_EQ(sample_token(logits.data(), 4, {.temperature = 1.0f, .top_k = 1}, rng), 1);
}

}  // namespace
}  // namespace troupe::actors
