// The nn types that travel in actor calls (actors/nn_codecs.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/nn_codecs.h"
#include "actors/training_types.h"

namespace troupe::actors {
namespace {

template <class T>
T round_trip(const T& value) {
  Writer w;
  w.write(value);
  Reader r(w.bytes());
  T out{};
  EXPECT_TRUE(decode_values(r, out).ok()) << r.status();
  return out;
}

template <class T>
absl::Status decode_bytes(const std::vector<uint8_t>& bytes) {
  std::vector<std::byte> raw(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i)
    raw[i] = static_cast<std::byte>(bytes[i]);
  Reader r(raw);
  T out{};
  return decode_values(r, out);
}

TEST(NnCodecsTest, ModelConfigOptionsDTypeAndRangesRoundTrip) {
  const nn::ModelConfig c = nn::GPTConfig{.max_seq_len = 48,
                                          .vocab_size = 100,
                                          .padded_vocab_size = 128,
                                          .num_layers = 3,
                                          .num_heads = 2,
                                          .channels = 32};
  const nn::ModelConfig back = round_trip(c);
  ASSERT_NE(back.gpt2(), nullptr);
  EXPECT_EQ(back.gpt2()->max_seq_len, 48);
  EXPECT_EQ(back.gpt2()->vocab_size, 100);
  EXPECT_EQ(back.gpt2()->padded_vocab_size, 128);
  EXPECT_EQ(back.gpt2()->num_layers, 3);
  EXPECT_EQ(back.gpt2()->num_heads, 2);
  EXPECT_EQ(back.gpt2()->channels, 32);
  const nn::ModelConfig llama = nn::LlamaConfig{.vocab_size = 100,
                                                .hidden_size = 32,
                                                .intermediate_size = 64,
                                                .num_hidden_layers = 2,
                                                .num_attention_heads = 4,
                                                .num_key_value_heads = 2,
                                                .max_position_embeddings = 48,
                                                .rms_norm_eps = 1e-5,
                                                .rope_theta = 500000.0,
                                                .tie_word_embeddings = true};
  const nn::ModelConfig llama_back = round_trip(llama);
  ASSERT_NE(llama_back.llama(), nullptr);
  EXPECT_EQ(*llama_back.llama(), *llama.normalized().llama());
  EXPECT_TRUE(round_trip(nn::ModelOptions{.recompute_activations = true}).recompute_activations);
  EXPECT_EQ(round_trip(nn::DType::kBFloat16), nn::DType::kBFloat16);
  EXPECT_EQ(round_trip(nn::ParamRange{7, 4096}), (nn::ParamRange{7, 4096}));
  const StepReport r{.step = 3,
                     .at = {.d = 1, .p = 2, .t = 3},
                     .owned = {10, 20},
                     .slice_params = 40,
                     .holds_loss = true,
                     .loss = 2.5,
                     .grad_norm_sq = 0.125,
                     .found_inf = true,
                     .samples = 8,
                     .tokens = 128,
                     .data_position = 24,
                     .epoch = 1,
                     .forward_ms = 1.5,
                     .backward_ms = 2.5,
                     .comm_ms = 3.5,
                     .comm_exposed_ms = 0.5,
                     .step_ms = 9.5};
  const StepReport rb = round_trip(r);
  EXPECT_EQ(rb.step, 3);
  EXPECT_TRUE(rb.at == r.at);
  EXPECT_EQ(rb.owned, r.owned);
  EXPECT_EQ(rb.slice_params, 40);
  EXPECT_TRUE(rb.holds_loss);
  EXPECT_EQ(rb.loss, 2.5);
  EXPECT_EQ(rb.grad_norm_sq, 0.125);
  EXPECT_TRUE(rb.found_inf);
  EXPECT_EQ(rb.samples, 8);
  EXPECT_EQ(rb.tokens, 128);
  EXPECT_EQ(rb.data_position, 24);
  EXPECT_EQ(rb.epoch, 1);
  EXPECT_EQ(rb.forward_ms, 1.5);
  EXPECT_EQ(rb.backward_ms, 2.5);
  EXPECT_EQ(rb.comm_ms, 3.5);
  EXPECT_EQ(rb.comm_exposed_ms, 0.5);
  EXPECT_EQ(rb.step_ms, 9.5);
}

TEST(NnCodecsTest, MalformedValuesAreRefused) {
  absl::Status bad_type = decode_bytes<nn::DType>({3});
  EXPECT_EQ(bad_type.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_type.message().find("DType 3"), absl::string_view::npos) << bad_type;
  std::vector<uint8_t> backwards(16, 0);
  backwards[0] = 9;  // begin 9, end 0
  absl::Status bad_range = decode_bytes<nn::ParamRange>(backwards);
  EXPECT_EQ(bad_range.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_range.message().find("ends before it begins"), absl::string_view::npos)
      << bad_range;
  EXPECT_FALSE(decode_bytes<nn::ModelConfig>({1, 0, 0, 0}).ok()) << "too short";
}

}  // namespace
}  // namespace troupe::actors
