#include "actors/gradient_buckets.h"

#include <gtest/gtest.h>

namespace troupe::actors {
namespace {

nn::GPTParamLayout layout() {
  nn::GPTConfig c{.max_seq_len = 8,
                  .vocab_size = 50,
                  .padded_vocab_size = 64,
                  .num_layers = 3,
                  .num_heads = 2,
                  .channels = 8};
  return nn::GPTParamLayout(c);
}

TEST(GradientBuckets, CoverTheBufferFromTheEndWithoutOverlap) {
  nn::GPTParamLayout l = layout();
  for (size_t size : {size_t{1}, l.block_size(), 2 * l.block_size() + 1, l.num_params() * 2}) {
    GradientBuckets b(l, size);
    size_t end = l.num_params();
    for (const GradientBucket& bucket : b.buckets()) {
      EXPECT_EQ(bucket.end, end) << size;
      EXPECT_LT(bucket.begin, bucket.end);
      end = bucket.begin;
    }
    EXPECT_EQ(end, 0u) << size;
  }
}

TEST(GradientBuckets, OnePhaseABucketWhenBucketsAreSmall) {
  nn::GPTParamLayout l = layout();
  GradientBuckets b(l, 1);
  // lnf, three blocks, the embeddings.
  ASSERT_EQ(b.buckets().size(), 5u);
  EXPECT_EQ(b.buckets()[0].begin, l.block_begin(3));
  EXPECT_EQ(b.buckets()[3].begin, l.block_begin(0));
  EXPECT_EQ(b.buckets()[4].begin, 0u);
}

TEST(GradientBuckets, OneBucketWhenItHoldsEverything) {
  nn::GPTParamLayout l = layout();
  GradientBuckets b(l, l.num_params() + 1);
  ASSERT_EQ(b.buckets().size(), 1u);
  b.reset();
  EXPECT_TRUE(b.ready(l.block_begin(0)).empty());  // wte is not final until the end
  EXPECT_EQ(b.ready(0), std::vector<size_t>{0});
}

TEST(GradientBuckets, ReadyAsBackwardProceedsEachOnce) {
  nn::GPTParamLayout l = layout();
  GradientBuckets b(l, l.block_size());  // a block each; lnf joins the last block
  b.reset();
  EXPECT_TRUE(b.ready(l.block_begin(3)).empty());  // lnf alone is below the size
  EXPECT_EQ(b.ready(l.block_begin(2)), std::vector<size_t>{0});
  EXPECT_EQ(b.ready(l.block_begin(1)), std::vector<size_t>{1});
  EXPECT_TRUE(b.ready(l.block_begin(1)).empty());
  std::vector<size_t> rest = b.ready(0);
  EXPECT_EQ(rest.size(), b.buckets().size() - 2);
  b.reset();
  EXPECT_EQ(b.ready(0).size(), b.buckets().size());
}

TEST(GradientBuckets, LeaveOutTheStartTheStageReducesItself) {
  nn::GPTParamLayout l = layout();
  for (size_t size : {size_t{1}, l.block_size(), l.num_params() * 2}) {
    GradientBuckets b(l, size, l.wpe());
    ASSERT_FALSE(b.buckets().empty());
    EXPECT_EQ(b.buckets().front().end, l.num_params()) << size;
    EXPECT_EQ(b.buckets().back().begin, l.wpe()) << size;  // wpe, not wte
    b.reset();
    EXPECT_EQ(b.ready(0).size(), b.buckets().size()) << size;
  }
}

}  // namespace
}  // namespace troupe::actors
