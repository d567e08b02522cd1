// How an elastic job splits its unchanged global batch at each size.
#include "trainers/elastic_batch.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

namespace troupe::trainers {
namespace {

TrainConfig elastic(int64_t global, int64_t micro, int dp) {
  TrainConfig c;
  c.train_batch_size = global;
  c.micro_batch_size = micro;
  c.gradient_accumulation_steps = global / (micro * dp);
  c.parallel.dp = dp;
  c.elasticity.enabled = true;
  return c;
}

TEST(ElasticBatchTest, TheLargestMicroBatchThatSplitsTheGlobalBatchIsTaken) {
  const TrainConfig c = elastic(48, 8, 2);  // 48 = 2 x 8 x 3
  for (auto [dp, micro, accumulation] :
       {std::tuple{1, 8, 6}, std::tuple{2, 8, 3}, std::tuple{3, 8, 2}, std::tuple{4, 6, 2},
        std::tuple{6, 8, 1}, std::tuple{8, 6, 1}, std::tuple{16, 3, 1}, std::tuple{48, 1, 1}}) {
    absl::StatusOr<BatchSplit> split = plan_batch(c, dp);
    ASSERT_TRUE(split.ok()) << "dp " << dp << ": " << split.status();
    EXPECT_EQ(split->dp, dp);
    EXPECT_EQ(split->micro_batch, micro) << "dp " << dp;
    EXPECT_EQ(split->grad_accum, accumulation) << "dp " << dp;
    EXPECT_EQ(split->dp * split->micro_batch * split->grad_accum, 48);
  }
  EXPECT_EQ(plan_batch(c, 4)->describe(48), "48 = 4 x 6 x 2 (dp x micro-batch x accumulation)");
}

TEST(ElasticBatchTest, OnlyTheAllowedMicroBatchesAreTaken) {
  TrainConfig c = elastic(48, 8, 2);
  c.elasticity.micro_batch_sizes = {4, 8};
  EXPECT_EQ(plan_batch(c, 4)->micro_batch, 4);  // 6 would split 48 too, but is not allowed
  EXPECT_EQ(plan_batch(c, 4)->grad_accum, 3);
  absl::StatusOr<BatchSplit> five = plan_batch(c, 5);
  EXPECT_EQ(five.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(
      absl::StrContains(five.status().message(), "the global batch 48 cannot be split over dp 5"))
      << five.status();
  EXPECT_TRUE(absl::StrContains(five.status().message(), "one of [4, 8]")) << five.status();
  // 48 = 16 x 3 x 1, but 3 is not allowed.
  EXPECT_FALSE(plan_batch(c, 16).ok());
}

TEST(ElasticBatchTest, ASizeOutsideTheBoundsIsRefused) {
  TrainConfig c = elastic(48, 8, 2);
  c.elasticity.min_dp = 2;
  c.elasticity.max_dp = 3;
  EXPECT_TRUE(plan_batch(c, 3).ok());
  for (int dp : {1, 4}) {
    absl::StatusOr<BatchSplit> split = plan_batch(c, dp);
    EXPECT_EQ(split.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_TRUE(absl::StrContains(split.status().message(), "outside elasticity's [min_dp 2"))
        << split.status();
  }
}

TEST(ElasticBatchTest, ASplitChangesOnlyTheBatchKeysAndDp) {
  const TrainConfig c = elastic(48, 8, 2);
  const TrainConfig three = with_split(c, *plan_batch(c, 3));
  EXPECT_EQ(three.parallel.dp, 3);
  EXPECT_EQ(three.train_batch_size, 48);
  EXPECT_EQ(three.micro_batch_size, 8);
  EXPECT_EQ(three.gradient_accumulation_steps, 2);
}

}  // namespace
}  // namespace troupe::trainers
