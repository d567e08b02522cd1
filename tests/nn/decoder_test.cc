// Incremental decoding (nn/model/decoder.h) against the whole forward, for GPT-2 and Llama (one
// KV head per query head, grouped, and one for all): a prefill and each appended position give
// the logits the forward gives at that position of the same tokens, to float rounding; greedy
// decoding with the cache picks the same tokens as without it; rows of a batch are independent;
// reset starts over bitwise; requests a decoder cannot serve are refused with the documented
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/model/config.h"
#include "nn/model/decoder.h"
#include "nn/model/model.h"

namespace troupe::nn {
namespace {

constexpr uint64_t kSeed = 1234;

ModelConfig gpt_config() {
  GPTConfig c;
  c.max_seq_len = 64;
  c.vocab_size = 97;
  c.padded_vocab_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.channels = 64;
  return c;
}

ModelConfig llama_config(int kv_heads, bool tied = false) {
  LlamaConfig c{.vocab_size = 97,
                .hidden_size = 64,
                .intermediate_size = 96,
                .num_hidden_layers = 2,
                .num_attention_heads = 4,
                .num_key_value_heads = kv_heads,
                .max_position_embeddings = 64,
                .rms_norm_eps = 1e-5,
                .rope_theta = 10000.0,
                .tie_word_embeddings = tied,
                .padded_vocab_size = 128};
  return c;
}

struct Case {
  std::string name;
  ModelConfig config;
};

std::vector<Case> cases() {
  return {{"gpt2", gpt_config()},
          {"llama_gqa", llama_config(2)},
          {"llama_mha", llama_config(4, /*tied=*/true)},
          {"llama_mqa", llama_config(1)}};
}

std::unique_ptr<Model> make_model(const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Model>> model = create_model(config);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->init_parameters(kSeed);
  // Weights 5x GPT-2's initialisation: logits far enough apart that greedy picks are not ties.
  float* p = (*model)->params();
  for (size_t i = 0; i < (*model)->num_params(); ++i)
    p[i] *= 5.0f;
  return *std::move(model);
}

std::vector<int32_t> prompt(int T, int salt = 0) {
  std::vector<int32_t> out;
  for (int t = 0; t < T; ++t)
    out.push_back((t * 37 + 11 + salt * 13) % 97);
  return out;
}

// The forward's logits [V] at the last position of each row of `rows` [B, T].
std::vector<std::vector<float>> full_logits(Model& model, const std::vector<int32_t>& rows, int B) {
  const int T = static_cast<int>(rows.size()) / B, Vp = model.config().padded_vocab();
  absl::StatusOr<float> ran = model.forward(rows.data(), nullptr, B, T);
  EXPECT_TRUE(ran.ok()) << ran.status();
  std::vector<std::vector<float>> out;
  for (int b = 0; b < B; ++b) {
    const float* l = model.logits() + (static_cast<size_t>(b) * T + T - 1) * Vp;
    out.emplace_back(l, l + model.config().vocab_size());
  }
  return out;
}

// Max |a - b| over the V real columns, relative to max(1, max |a|).
double relative_diff(const std::vector<float>& a, const float* b) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return diff / scale;
}

int argmax(const float* logits, int V) {
  return static_cast<int>(std::max_element(logits, logits + V) - logits);
}

constexpr double kTolerance = 1e-4;

class DecoderTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecoderTest, PrefillAndEachStepMatchTheForward) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  const int V = model->config().vocab_size();
  absl::StatusOr<std::unique_ptr<Decoder>> decoder = model->make_decoder(1, 64);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  std::vector<int32_t> tokens = prompt(9);
  ASSERT_TRUE((*decoder)->append(tokens.data(), static_cast<int>(tokens.size())).ok());
  EXPECT_EQ((*decoder)->length(), 9);
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> want = full_logits(*model, tokens, 1)[0];
    EXPECT_LE(relative_diff(want, (*decoder)->logits()), kTolerance)
        << "position " << tokens.size() - 1;
    const int32_t next = (step * 29 + 5) % V;
    tokens.push_back(next);
    ASSERT_TRUE((*decoder)->append(&next, 1).ok());
  }
  EXPECT_EQ((*decoder)->length(), 29);
}

TEST_P(DecoderTest, GreedyDecodingIsTheSameWithAndWithoutTheCache) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  const int V = model->config().vocab_size();
  const std::vector<int32_t> start = prompt(5, 1);
  // Without: the forward over the whole prefix for every token.
  std::vector<int32_t> uncached = start;
  for (int n = 0; n < 40; ++n) {
    const std::vector<float> logits = full_logits(*model, uncached, 1)[0];
    uncached.push_back(argmax(logits.data(), V));
  }
  std::unique_ptr<Decoder> decoder = *model->make_decoder(1, 64);
  std::vector<int32_t> cached = start;
  ASSERT_TRUE(decoder->append(cached.data(), static_cast<int>(cached.size())).ok());
  for (int n = 0; n < 40; ++n) {
    const int32_t next = argmax(decoder->logits(), V);
    cached.push_back(next);
    ASSERT_TRUE(decoder->append(&next, 1).ok());
  }
  EXPECT_EQ(cached, uncached);
}

TEST_P(DecoderTest, RowsOfABatchAreIndependent) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  const int Vp = model->config().padded_vocab();
  const std::vector<int32_t> a = prompt(6, 2), b = prompt(6, 3);
  std::vector<int32_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  std::unique_ptr<Decoder> decoder = *model->make_decoder(2, 16);
  ASSERT_TRUE(decoder->append(both.data(), 6).ok());
  const std::vector<int32_t> next = {3, 7};
  ASSERT_TRUE(decoder->append(next.data(), 1).ok());
  std::vector<int32_t> rows = a;
  rows.push_back(3);
  rows.insert(rows.end(), b.begin(), b.end());
  rows.push_back(7);
  const std::vector<std::vector<float>> want = full_logits(*model, rows, 2);
  EXPECT_LE(relative_diff(want[0], decoder->logits()), kTolerance);
  EXPECT_LE(relative_diff(want[1], decoder->logits() + Vp), kTolerance);
}

TEST_P(DecoderTest, APrefillInPiecesMatchesOneAndResetStartsOver) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  const int Vp = model->config().padded_vocab();
  const std::vector<int32_t> tokens = prompt(12, 4);
  std::unique_ptr<Decoder> decoder = *model->make_decoder(1, 12);
  ASSERT_TRUE(decoder->append(tokens.data(), 12).ok());
  const std::vector<float> whole(decoder->logits(), decoder->logits() + Vp);
  decoder->reset();
  EXPECT_EQ(decoder->length(), 0);
  ASSERT_TRUE(decoder->append(tokens.data(), 5).ok());
  ASSERT_TRUE(decoder->append(tokens.data() + 5, 7).ok());
  EXPECT_LE(relative_diff(std::vector<float>(whole.begin(), whole.begin() + 97), decoder->logits()),
            kTolerance);
  // Full: one more position is refused, and nothing changes.
  const int32_t more = 1;
  absl::Status full = decoder->append(&more, 1);
  EXPECT_EQ(full.code(), absl::StatusCode::kInvalidArgument) << full;
  EXPECT_EQ(decoder->length(), 12);
  decoder->reset();
  ASSERT_TRUE(decoder->append(tokens.data(), 12).ok());
  EXPECT_TRUE(std::equal(whole.begin(), whole.end(), decoder->logits()));  // bitwise
}

TEST_P(DecoderTest, BadAppendsAreRefused) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  std::unique_ptr<Decoder> decoder = *model->make_decoder(1, 8);
  const std::vector<int32_t> bad = {1, 97};
  EXPECT_EQ(decoder->append(bad.data(), 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder->append(bad.data(), 0).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> nine(9, 1);
  EXPECT_EQ(decoder->append(nine.data(), 9).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(decoder->length(), 0);
}

TEST_P(DecoderTest, RequestsADecoderCannotServeAreRefused) {
  std::unique_ptr<Model> model = make_model(GetParam().config);
  EXPECT_EQ(model->make_decoder(0, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->make_decoder(1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->make_decoder(1, 65).status().code(), absl::StatusCode::kInvalidArgument);
  // A pipeline part.
  ASSERT_TRUE(model->set_part(0, 1, false).ok());
  EXPECT_EQ(model->make_decoder(1, 8).status().code(), absl::StatusCode::kFailedPrecondition);
  // A tensor-parallel rank (where the config splits in two).
  absl::StatusOr<std::unique_ptr<Model>> rank =
      create_model(GetParam().config, {}, {}, TensorSlice{.rank = 0, .size = 2});
  if (rank.ok()) {
    absl::Status sliced = (*rank)->make_decoder(1, 8).status();
    EXPECT_EQ(sliced.code(), absl::StatusCode::kFailedPrecondition) << sliced;
  }
  // Parameters not bound.
  absl::StatusOr<std::unique_ptr<Model>> unbound =
      create_model(GetParam().config, {}, ModelStorage{.parameters = false});
  ASSERT_TRUE(unbound.ok()) << unbound.status();
  EXPECT_EQ((*unbound)->make_decoder(1, 8).status().code(), absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Architectures, DecoderTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

}  // namespace
}  // namespace troupe::nn
