// DistributedSampler: each epoch uses every sample at most once and drops
// exactly N mod G, for dp 1 to 3; replicas take strided shares of the same
// sequence; a run resumes at a position with another dp and loses or
// repeats nothing; everything follows from the seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

#include "actors/data/sampler.h"

namespace troupe::actors {
namespace {

DistributedSampler make(int64_t n, int m, int a, int dp, int rank, uint64_t seed = 42,
                        bool shuffle = true) {
  auto s = DistributedSampler::create({.num_samples = n,
                                       .micro_batch = m,
                                       .grad_accum = a,
                                       .dp = dp,
                                       .rank = rank,
                                       .seed = seed,
                                       .shuffle = shuffle});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// What all dp replicas take from micro-steps [from, to) (positions), in the
// order of the sequence (position p + d + k dp).
std::vector<int64_t> consume(int64_t n, int m, int a, int dp, int64_t from, int64_t to,
                             uint64_t seed = 42) {
  std::vector<DistributedSampler> replicas;
  for (int d = 0; d < dp; ++d)
    replicas.push_back(make(n, m, a, dp, d, seed));
  std::vector<int64_t> taken;
  const int64_t step = int64_t{m} * dp;
  for (int64_t p = from; p < to; p += step) {
    std::vector<int64_t> slot(static_cast<size_t>(step));
    for (int d = 0; d < dp; ++d) {
      std::vector<int64_t> ids = replicas[static_cast<size_t>(d)].micro_batch_indices(p);
      EXPECT_EQ(ids.size(), static_cast<size_t>(m));
      for (int k = 0; k < m; ++k)
        slot[static_cast<size_t>(d + k * dp)] = ids[static_cast<size_t>(k)];
    }
    taken.insert(taken.end(), slot.begin(), slot.end());
  }
  return taken;
}

class SamplerEpochTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(SamplerEpochTest, EveryReplicaSampleAtMostOnceAndRemainderDropped) {
  const auto [dp, m, a] = GetParam();
  const int64_t n = 103;
  DistributedSampler s = make(n, m, a, dp, 0);
  const int64_t g = int64_t{m} * a * dp;
  ASSERT_EQ(s.global_batch(), g);
  ASSERT_EQ(s.steps_per_epoch(), n / g);
  const int64_t epoch_len = s.samples_per_epoch();
  ASSERT_EQ(epoch_len, (n / g) * g);

  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> taken = consume(n, m, a, dp, epoch * epoch_len, (epoch + 1) * epoch_len);
    ASSERT_EQ(static_cast<int64_t>(taken.size()), epoch_len);
    std::set<int64_t> distinct(taken.begin(), taken.end());
    EXPECT_EQ(distinct.size(), taken.size()) << "a sample repeated in epoch " << epoch;
    for (int64_t id : taken) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, n);
    }
    EXPECT_EQ(n - static_cast<int64_t>(distinct.size()), n % g) << "dropped in epoch " << epoch;
    // The sequence is the epoch's permutation, minus its tail.
    std::vector<int64_t> perm = s.permutation(epoch);
    EXPECT_TRUE(std::equal(taken.begin(), taken.end(), perm.begin()));
    EXPECT_EQ(s.epoch_of(epoch * epoch_len), epoch);
    EXPECT_EQ(s.epoch_of((epoch + 1) * epoch_len - 1), epoch);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SamplerEpochTest,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Values(1, 4),
                                            ::testing::Values(1, 3)));

TEST(SamplerTest, ReplicasAreStrided) {
  // Without shuffle the sequence is 0, 1, 2, ...: rank d takes p + d + k dp.
  DistributedSampler r0 = make(100, 3, 1, 4, 0, 1, false);
  DistributedSampler r3 = make(100, 3, 1, 4, 3, 1, false);
  EXPECT_EQ(r0.micro_batch_indices(0), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r3.micro_batch_indices(0), (std::vector<int64_t>{3, 7, 11}));
  EXPECT_EQ(r3.micro_batch_indices(12), (std::vector<int64_t>{15, 19, 23}));
  // 96 per epoch (G = 12): position 96 is epoch 1's sample 0.
  EXPECT_EQ(r0.micro_batch_indices(96), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r0.step_of(95), 7);
  EXPECT_EQ(r0.step_of(96), 8);
}

TEST(SamplerTest, EpochsArePermutationsFixedByTheSeed) {
  DistributedSampler s = make(50, 1, 1, 1, 0, 7);
  std::vector<int64_t> p0 = s.permutation(0), p1 = s.permutation(1);
  std::vector<int64_t> sorted0 = p0, sorted1 = p1, identity(50);
  std::sort(sorted0.begin(), sorted0.end());
  std::sort(sorted1.begin(), sorted1.end());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted0, identity);
  EXPECT_EQ(sorted1, identity);
  EXPECT_NE(p0, p1);
  EXPECT_NE(p0, identity);
  EXPECT_EQ(make(50, 1, 1, 1, 0, 7).permutation(1), p1);  // another sampler, same seed
  EXPECT_NE(make(50, 1, 1, 1, 0, 8).permutation(1), p1);
  EXPECT_EQ(make(50, 1, 1, 1, 0, 7, false).permutation(3), identity);
  // Pinned: splitmix64 and Fisher-Yates are portable, so this order is the
  // same on every platform and compiler (values from an independent Python
  // transcription of random.h and sampler.cc). A change here breaks resuming
  // runs started by an older troupe.
  EXPECT_EQ(std::vector<int64_t>(p0.begin(), p0.begin() + 10),
            (std::vector<int64_t>{31, 4, 0, 46, 14, 40, 20, 34, 45, 13}));
  EXPECT_EQ(std::vector<int64_t>(p1.begin(), p1.begin() + 10),
            (std::vector<int64_t>{6, 8, 30, 1, 3, 5, 12, 35, 25, 19}));
  EXPECT_EQ(consume(50, 2, 1, 2, 0, 4, 7), (std::vector<int64_t>(p0.begin(), p0.begin() + 4)));
}

TEST(SamplerTest, DeterministicAcrossRunsAndInstances) {
  std::vector<int64_t> first = consume(1000, 4, 2, 3, 0, 2000, 99);
  std::vector<int64_t> second = consume(1000, 4, 2, 3, 0, 2000, 99);
  EXPECT_EQ(first, second);
  EXPECT_NE(first, consume(1000, 4, 2, 3, 0, 2000, 100));
}

TEST(SamplerTest, ResumeWithAnotherDpContinuesTheSameSequence) {
  // N = 120 is a multiple of both G = 2 x 1 x 2 = 4 and G = 2 x 1 x 3 = 6, so
  // both have 120 samples an epoch and positions mean the same.
  const int64_t n = 120;
  ASSERT_EQ(make(n, 2, 1, 2, 0).samples_per_epoch(), make(n, 2, 1, 3, 0).samples_per_epoch());
  std::vector<int64_t> before = consume(n, 2, 1, 2, 0, 60);     // 15 micro-steps at dp 2
  std::vector<int64_t> after = consume(n, 2, 1, 3, 60, 2 * n);  // the rest at dp 3
  std::vector<int64_t> all = before;
  all.insert(all.end(), after.begin(), after.end());
  EXPECT_EQ(all, consume(n, 2, 1, 2, 0, 2 * n)) << "not the sequence dp 2 would have taken";
  std::map<int64_t, int> epoch0, epoch1;
  for (size_t i = 0; i < all.size(); ++i)
    (i < n ? epoch0 : epoch1)[all[i]]++;
  EXPECT_EQ(epoch0.size(), 120u);
  EXPECT_EQ(epoch1.size(), 120u);
  for (const auto& [id, count] : epoch0)
    EXPECT_EQ(count, 1) << id;
  for (const auto& [id, count] : epoch1)
    EXPECT_EQ(count, 1) << id;
}

TEST(SamplerTest, RebasedResumeFinishesTheEpochWhenEpochLengthsDiffer) {
  // N = 100, m = a = 1: dp 3 uses 99 an epoch, dp 2 uses 100.
  const int64_t n = 100;
  DistributedSampler dp3 = make(n, 1, 1, 3, 0);
  DistributedSampler dp2 = make(n, 1, 1, 2, 0);
  ASSERT_EQ(dp3.samples_per_epoch(), 99);
  ASSERT_EQ(dp2.samples_per_epoch(), 100);
  // dp 3 stopped 42 samples into epoch 1.
  const int64_t stopped = 99 + 42;
  const int64_t resumed = dp2.rebase_position(stopped, dp3.samples_per_epoch());
  EXPECT_EQ(resumed, 100 + 42);
  std::vector<int64_t> old_part = consume(n, 1, 1, 3, 99, stopped);
  std::vector<int64_t> new_part = consume(n, 1, 1, 2, resumed, 200);
  std::multiset<int64_t> epoch1(old_part.begin(), old_part.end());
  epoch1.insert(new_part.begin(), new_part.end());
  EXPECT_EQ(epoch1.size(), 100u);
  EXPECT_EQ(std::set<int64_t>(epoch1.begin(), epoch1.end()).size(), 100u) << "a repeat";
  // And the other way: an offset past the shorter epoch's end starts the next.
  EXPECT_EQ(dp3.rebase_position(100 + 99, 100), 2 * 99);
  EXPECT_EQ(dp3.rebase_position(100 + 30, 100), 99 + 30);
  EXPECT_EQ(dp2.rebase_position(1234, dp2.samples_per_epoch()), 1234);
}

TEST(SamplerTest, AnyPositionIsValidAcrossTheEpochBoundary) {
  DistributedSampler s = make(10, 2, 1, 2, 1);  // G = 4, 8 an epoch
  // Position 7: rank 1 takes sample(8) and sample(10), in epoch 1.
  EXPECT_EQ(s.micro_batch_indices(7),
            (std::vector<int64_t>{s.permutation(1)[0], s.permutation(1)[2]}));
  EXPECT_EQ(s.sample_at(7), s.permutation(0)[7]);
  EXPECT_EQ(s.offset_in_epoch(13), 5);
}

TEST(SamplerTest, BadOptionsAreRejected) {
  auto err = [](SamplerOptions o) {
    return std::string(DistributedSampler::create(o).status().message());
  };
  EXPECT_NE(err({.num_samples = 11, .micro_batch = 2, .grad_accum = 2, .dp = 3})
                .find("11 samples are fewer than one global batch"),
            std::string::npos);
  EXPECT_NE(err({.num_samples = 10, .dp = 2, .rank = 2}).find("rank 2"), std::string::npos);
  EXPECT_NE(err({.num_samples = 10, .micro_batch = 0}).find("micro_batch is 0"), std::string::npos);
  EXPECT_NE(err({.num_samples = 10, .dp = 0}).find("dp is 0"), std::string::npos);
  EXPECT_TRUE(
      DistributedSampler::create({.num_samples = 12, .micro_batch = 2, .grad_accum = 2, .dp = 3})
          .ok());
}

}  // namespace
}  // namespace troupe::actors
