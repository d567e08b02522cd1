// The validation loss: every window of the held-out dataset scored once, however many ranks
// share them, and bits per byte from the dataset's text bytes.
#include "actors/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "nn/model/model.h"

namespace troupe::actors {
namespace {

constexpr nn::ModelConfig kTiny = nn::GPTConfig{.max_seq_len = 8,
                                                .vocab_size = 64,
                                                .padded_vocab_size = 64,
                                                .num_layers = 1,
                                                .num_heads = 2,
                                                .channels = 16};

std::unique_ptr<nn::Model> tiny_model() {
  auto model = nn::create_model(kTiny);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->init_parameters(5);
  return *std::move(model);
}

TokenDataset dataset(int64_t n) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    tokens[i] = static_cast<int32_t>((i * 7 + i / 5) % 64);
  auto data = TokenDataset::from_tokens(std::move(tokens), 64);
  EXPECT_TRUE(data.ok()) << data.status();
  return *std::move(data);
}

TEST(ValidationTest, RanksShareTheWindowsAndTheirSumIsOneRanks) {
  auto model = tiny_model();
  const TokenDataset data = dataset(8 * 23 + 1);  // 23 windows of 8
  ValidationRequest request{.seq_len = 8, .batch = 4};
  auto whole = validation_loss(*model, data, request);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->windows, 23);
  EXPECT_EQ(whole->tokens, 23 * 8);
  for (int world : {2, 3, 5}) {
    std::vector<ValidationPart> parts;
    for (int r = 0; r < world; ++r) {
      ValidationRequest part = request;
      part.rank = r;
      part.world = world;
      auto p = validation_loss(*model, data, part);
      ASSERT_TRUE(p.ok()) << p.status();
      parts.push_back(*p);
    }
    ValidationResult sum = combine(parts, data.header());
    EXPECT_EQ(sum.windows, 23) << world;
    EXPECT_EQ(sum.tokens, 23 * 8) << world;
    EXPECT_NEAR(sum.loss(), whole->loss_sum / whole->tokens, 1e-5) << world;
  }
  // eval_iters: only the first windows.
  request.max_windows = 6;
  auto few = validation_loss(*model, data, request);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(few->windows, 6);
}

TEST(ValidationTest, BitsPerByteAreTheLossInBitsTimesTokensPerByte) {
  ValidationResult v{.loss_sum = 2.0 * 100, .tokens = 100, .windows = 10};
  EXPECT_EQ(v.bits_per_byte(), 0);  // the text's bytes unknown
  TokenDatasetHeader header{.vocab_size = 64, .num_tokens = 300, .text_bytes = 1200};
  ValidationPart part{.loss_sum = 200, .tokens = 100, .windows = 10};
  ValidationResult r = combine(std::span<const ValidationPart>(&part, 1), header);
  EXPECT_DOUBLE_EQ(r.loss(), 2.0);
  EXPECT_NEAR(r.bits_per_byte(), 2.0 / std::numbers::ln2 * 0.25, 1e-12);
}

TEST(ValidationTest, BadRequestsAreRefused) {
  auto model = tiny_model();
  const TokenDataset data = dataset(100);
  EXPECT_EQ(validation_loss(*model, data, {.seq_len = 9}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(validation_loss(*model, data, {.seq_len = 8, .batch = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(validation_loss(*model, data, {.seq_len = 8, .rank = 2, .world = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(validation_loss(*model, dataset(8), {.seq_len = 8}).status().code(),
            absl::StatusCode::kInvalidArgument);  // no window of 9 tokens
  auto big = TokenDataset::from_tokens({1, 2, 3}, 1000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(validation_loss(*model, *big, {.seq_len = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);  // a vocabulary larger than the model's
}

}  // namespace
}  // namespace troupe::actors
