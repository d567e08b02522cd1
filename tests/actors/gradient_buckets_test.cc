#include "actors/gradient_buckets.h"
#include "nn/gpt2/layout.h"

#include <gtest/gtest.h>

namespace troupe::actors {
namespace {

// A GPT's layout: the buckets see its seam view (model()); the test names its tensors.
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
    GradientBuckets b(l.model(), size);
    size_t end = l.num_params();
    for (const GradientBucket& bucket : b.buckets()) {
      EXPECT_EQ(bucket.end, end) << size;
      EXPECT_LT(bucket.begin, bucket.end);
      end = bucket.begin;
    }
    EXPECT_EQ(end, 0u) << size;
  }
}

TEST(GradientBuckets, OneLayerABucketWhenBucketsAreSmall) {
  nn::GPTParamLayout l = layout();
  GradientBuckets b(l.model(), 1);
  // lnf, six layers in each of three blocks, the embeddings.
  ASSERT_EQ(b.buckets().size(), 1u + 6 * 3 + 1);
  EXPECT_EQ(b.buckets()[0].begin, l.block_begin(3));
  EXPECT_EQ(b.buckets()[1].begin, l.block_tensor(2, nn::BlockTensor::kFcprojw));
  EXPECT_EQ(b.buckets()[2].begin, l.block_tensor(2, nn::BlockTensor::kFcw));
  EXPECT_EQ(b.buckets()[6].begin, l.block_begin(2));
  EXPECT_EQ(b.buckets()[18].begin, l.block_begin(0));
  EXPECT_EQ(b.buckets()[19].begin, 0u);
}

TEST(GradientBuckets, OneBucketWhenItHoldsEverything) {
  nn::GPTParamLayout l = layout();
  GradientBuckets b(l.model(), l.num_params() + 1);
  ASSERT_EQ(b.buckets().size(), 1u);
  b.reset();
  EXPECT_TRUE(b.ready(l.block_begin(0)).empty());  // wte is not final until the end
  EXPECT_EQ(b.ready(0), std::vector<size_t>{0});
}

// What backward finishes after block 0's attention projection has nothing left to hide behind:
// the last bucket holds only that, whatever the bucket size.
TEST(GradientBuckets, TheLastBucketHoldsOnlyWhatFollowsBlockZerosAttentionProjection) {
  nn::GPTParamLayout l = layout();
  const size_t tail = l.block_tensor(0, nn::BlockTensor::kAttprojw);
  for (size_t size : {l.block_size() / 2, l.block_size(), 2 * l.block_size() + 1}) {
    GradientBuckets b(l.model(), size);
    ASSERT_GE(b.buckets().size(), 2u) << size;
    EXPECT_EQ(b.buckets().back().begin, 0u) << size;
    EXPECT_LE(b.buckets().back().end, tail) << size;
  }
}

// Backward reports the layers in order (GPT::backward_blocks); each bucket comes out once, in
// order, and only when everything in it is final.
TEST(GradientBuckets, ReadyAsBackwardProceedsEachOnce) {
  nn::GPTParamLayout l = layout();
  for (size_t size : {size_t{1}, l.block_size() / 3, l.block_size(), l.num_params() + 1}) {
    GradientBuckets b(l.model(), size);
    for (int round = 0; round < 2; ++round) {
      b.reset();
      std::vector<size_t> seen;
      auto report = [&](size_t final_from) {
        for (size_t i : b.ready(final_from)) {
          EXPECT_GE(b.buckets()[i].begin, final_from) << size;
          seen.push_back(i);
        }
      };
      report(l.block_begin(3));
      for (int block = 2; block >= 0; --block) {
        for (nn::BlockTensor t :
             {nn::BlockTensor::kFcprojw, nn::BlockTensor::kFcw, nn::BlockTensor::kLn2w,
              nn::BlockTensor::kAttprojw, nn::BlockTensor::kQkvw, nn::BlockTensor::kLn1w}) {
          report(l.block_tensor(block, t));
        }
      }
      report(0);
      ASSERT_EQ(seen.size(), b.buckets().size()) << size;
      for (size_t i = 0; i < seen.size(); ++i)
        EXPECT_EQ(seen[i], i) << size;
    }
  }
}

TEST(GradientBuckets, LeaveOutTheStartTheStageReducesItself) {
  nn::GPTParamLayout l = layout();
  for (size_t size : {size_t{1}, l.block_size(), l.num_params() * 2}) {
    GradientBuckets b(l.model(), size, l.wpe());
    ASSERT_FALSE(b.buckets().empty());
    EXPECT_EQ(b.buckets().front().end, l.num_params()) << size;
    EXPECT_EQ(b.buckets().back().begin, l.wpe()) << size;  // wpe, not wte
    b.reset();
    EXPECT_EQ(b.ready(0).size(), b.buckets().size()) << size;
  }
}

}  // namespace
}  // namespace troupe::actors
