// The GPT model split over tensor-parallel ranks (nn/gpt.h, Megatron-LM's scheme) against the
// whole model: tp ranks simulated as threads (tests/nn/simulated_group.h) run the same batch, and
// their loss, logits and gradients must be the whole model's, sliced as gpt_param_layout.h says.
//
// Tolerance: the row-parallel sums and the loss's sums over the vocabulary run in another order
// than the whole model's, so values agree to fp32 rounding: |got - want| <= 1e-6 + 1e-5 |want|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nn/gpt2/gpt.h"
#include "tests/nn/simulated_group.h"

namespace troupe::nn {
namespace {

constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;
constexpr uint64_t kSeed = 7;

GPTConfig small_config() {
  return {.max_seq_len = 16,
          .vocab_size = 61,
          .padded_vocab_size = 64,
          .num_layers = 2,
          .num_heads = 4,
          .channels = 32};
}

struct Batch {
  int B = 2, T = 16;
  std::vector<int32_t> inputs, targets;
};

Batch make_batch(const GPTConfig& config) {
  Batch b;
  const int n = b.B * b.T;
  for (int i = 0; i < n; ++i) {
    b.inputs.push_back((i * 7 + 3) % config.vocab_size);
    b.targets.push_back((i * 11 + 5) % config.vocab_size);
  }
  return b;
}

// What one model computed on the batch.
struct Result {
  float loss = 0;
  std::vector<float> params, grads;
};

Result run_whole(const GPTConfig& config, const Batch& batch) {
  absl::StatusOr<GPT> gpt = GPT::create(config);
  EXPECT_TRUE(gpt.ok()) << gpt.status();
  gpt->init_parameters(kSeed);
  absl::StatusOr<float> loss =
      gpt->forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  EXPECT_TRUE(loss.ok()) << loss.status();
  EXPECT_TRUE(gpt->backward().ok());
  return {*loss,
          {gpt->params(), gpt->params() + gpt->num_params()},
          {gpt->grads(), gpt->grads() + gpt->num_params()}};
}

// Each of tp ranks' result on the batch, their models built with `options`.
std::vector<Result> run_sliced(const GPTConfig& config, const Batch& batch, int tp,
                               const ModelOptions& options = {}) {
  std::vector<Result> results(static_cast<size_t>(tp));
  SimulatedGroup group(tp);
  group.run([&](int rank) {
    absl::StatusOr<GPT> gpt = GPT::create(config, options, {}, {.rank = rank, .size = tp});
    if (!gpt.ok()) {
      ADD_FAILURE() << gpt.status();
      return;
    }
    gpt->init_parameters(kSeed);
    gpt->set_tensor_parallel(group.sum(rank), group.max(rank));
    absl::StatusOr<float> loss =
        gpt->forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(gpt->backward().ok());
    results[static_cast<size_t>(rank)] = {loss.value_or(NAN),
                                          {gpt->params(), gpt->params() + gpt->num_params()},
                                          {gpt->grads(), gpt->grads() + gpt->num_params()}};
  });
  return results;
}

void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = kAtol + kRtol * std::fabs(want[i]);
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > tol) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

class GPTTensorParallelTest : public testing::TestWithParam<int> {};

TEST_P(GPTTensorParallelTest, RanksComputeTheWholeModelsLossAndGradients) {
  const int tp = GetParam();
  const GPTConfig config = small_config();
  const Batch batch = make_batch(config);
  const Result whole = run_whole(config, batch);
  const std::vector<Result> ranks = run_sliced(config, batch, tp);
  const GPTParamLayout whole_layout(config);
  for (int r = 0; r < tp; ++r) {
    const GPTParamLayout layout(config, {.rank = r, .size = tp});
    const Result& got = ranks[static_cast<size_t>(r)];
    ASSERT_EQ(got.params.size(), layout.num_params());
    std::vector<float> want(layout.num_params());
    // The initialisation is the whole model's, sliced: the same bits.
    copy_to_slice(whole_layout.model(), layout.model(), whole.params.data(), want.data());
    EXPECT_EQ(got.params, want) << "rank " << r;
    EXPECT_NEAR(got.loss, whole.loss, kAtol + kRtol * std::fabs(whole.loss)) << "rank " << r;
    copy_to_slice(whole_layout.model(), layout.model(), whole.grads.data(), want.data());
    expect_close(absl::StrCat("rank ", r, " of ", tp, " gradients"), got.grads, want);
  }
}

TEST_P(GPTTensorParallelTest, RecomputedActivationsGiveTheSameGradients) {
  const int tp = GetParam();
  const GPTConfig config = small_config();
  const Batch batch = make_batch(config);
  const std::vector<Result> stored = run_sliced(config, batch, tp);
  const std::vector<Result> recomputed =
      run_sliced(config, batch, tp, {.recompute_activations = true});
  for (int r = 0; r < tp; ++r) {
    const auto i = static_cast<size_t>(r);
    EXPECT_EQ(recomputed[i].loss, stored[i].loss) << "rank " << r;
    EXPECT_EQ(recomputed[i].grads, stored[i].grads) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(TensorParallel, GPTTensorParallelTest, testing::Values(2, 4),
                         [](const testing::TestParamInfo<int>& param) {
                           return absl::StrCat("tp", param.param);
                         });

TEST(GPTTensorSliceTest, TheRanksSlicesMakeUpTheWholeModel) {
  const GPTConfig config = small_config();
  const GPTParamLayout whole(config);
  std::vector<float> original(whole.num_params());
  GPT::init_parameters(config, kSeed, 0, original.size(), original.data());
  for (int tp : {1, 2, 4}) {
    std::vector<float> rebuilt(whole.num_params(), NAN);
    size_t held = 0;
    for (int r = 0; r < tp; ++r) {
      const GPTParamLayout layout(config, {.rank = r, .size = tp});
      // The runs tile the slice's buffer, in order.
      size_t next = 0;
      for_each_slice_run(whole.model(), layout.model(), [&](size_t, size_t slice_offset, size_t n) {
        EXPECT_EQ(slice_offset, next) << "tp " << tp;
        next += n;
      });
      EXPECT_EQ(next, layout.num_params()) << "tp " << tp;
      held += layout.num_params();
      std::vector<float> slice(layout.num_params());
      copy_to_slice(whole.model(), layout.model(), original.data(), slice.data());
      copy_from_slice(whole.model(), layout.model(), slice.data(), rebuilt.data());
    }
    EXPECT_EQ(rebuilt, original) << "tp " << tp;
    // The split tensors are held once, the replicated ones by every rank.
    size_t replicated = 0;
    for (const ParamTensor& t : whole.tensors())
      if (t.split == TensorSplit::kReplicated) replicated += t.size;
    EXPECT_EQ(held, whole.num_params() + (tp - 1) * replicated) << "tp " << tp;
  }
}

TEST(GPTTensorSliceTest, ARangeOfARanksInitialisationIsThatRangeOfItsSlice) {
  const GPTConfig config = small_config();
  const TensorSlice slice{.rank = 1, .size = 2};
  absl::StatusOr<GPT> gpt = GPT::create(config, {}, {}, slice);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  gpt->init_parameters(kSeed);
  const size_t begin = gpt->param_layout().block_begin(1), end = gpt->num_params() - 5;
  std::vector<float> range(end - begin);
  GPT::init_parameters(config, slice, kSeed, begin, end, range.data());
  EXPECT_EQ(range, std::vector<float>(gpt->params() + begin, gpt->params() + end));
}

TEST(GPTTensorSliceTest, RefusesWhatDoesNotSplitAndRunsWithoutAGroup) {
  GPTConfig config = small_config();
  absl::StatusOr<GPT> three = GPT::create(config, {}, {}, {.rank = 0, .size = 3});
  EXPECT_TRUE(absl::IsInvalidArgument(three.status())) << three.status();
  EXPECT_NE(three.status().message().find("num_heads"), std::string::npos) << three.status();
  config.padded_vocab_size = 62;  // 62 rows over 4 ranks
  config.num_heads = 4;
  absl::StatusOr<GPT> vocab = GPT::create(config, {}, {}, {.rank = 0, .size = 4});
  EXPECT_TRUE(absl::IsInvalidArgument(vocab.status())) << vocab.status();
  EXPECT_NE(vocab.status().message().find("padded vocabulary"), std::string::npos);
  EXPECT_TRUE(absl::IsInvalidArgument(
      GPT::create(small_config(), {}, {}, {.rank = 2, .size = 2}).status()));

  const Batch batch = make_batch(small_config());
  absl::StatusOr<GPT> lone = GPT::create(small_config(), {}, {}, {.rank = 0, .size = 2});
  ASSERT_TRUE(lone.ok());
  absl::StatusOr<float> loss =
      lone->forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  EXPECT_TRUE(absl::IsFailedPrecondition(loss.status())) << loss.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(
      lone->embed_backward_rows(nullptr, std::vector<int32_t>(64, 0), 1)));
}

TEST(GPTTensorSliceTest, AFailedCollectiveEndsThePieceWithItsError) {
  const Batch batch = make_batch(small_config());
  absl::StatusOr<GPT> gpt = GPT::create(small_config(), {}, {}, {.rank = 0, .size = 2});
  ASSERT_TRUE(gpt.ok());
  int calls = 0;
  const AllReduceFn aborted = [&calls](float*, size_t) {
    ++calls;
    return absl::AbortedError("the group lost a member");
  };
  gpt->set_tensor_parallel(aborted, aborted);
  absl::StatusOr<float> loss =
      gpt->forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
  EXPECT_TRUE(absl::IsAborted(loss.status())) << loss.status();
  EXPECT_EQ(calls, 1);  // the embedding's: nothing ran after it
  EXPECT_TRUE(absl::IsFailedPrecondition(gpt->backward()));  // no loss to differentiate
}

}  // namespace
}  // namespace troupe::nn
