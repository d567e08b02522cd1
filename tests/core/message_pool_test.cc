#include "core/detail/message_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>
#include <vector>

namespace troupe::detail {
namespace {

TEST(MessagePoolTest, BlocksAreDistinctWritableAndReused) {
  for (size_t size : {size_t{1}, size_t{64}, size_t{65}, size_t{200}, size_t{512}, size_t{4096}}) {
    std::vector<void*> blocks;
    std::set<void*> distinct;
    for (int i = 0; i < 1000; ++i) {
      void* p = pool_allocate(size);
      std::memset(p, i & 0xff, size);
      blocks.push_back(p);
      distinct.insert(p);
    }
    EXPECT_EQ(distinct.size(), blocks.size()) << "size " << size;
    for (size_t i = 0; i < blocks.size(); ++i) {
      EXPECT_EQ(static_cast<unsigned char*>(blocks[i])[size - 1], i & 0xff);
      pool_free(blocks[i], size);
    }
  }
}

// The pattern the pool is for: one thread allocates, another frees, and
// threads come and go handing their caches back.
TEST(MessagePoolTest, ProducerConsumerAcrossThreadsAndThreadExit) {
  constexpr int kRounds = 20;
  constexpr int kPerRound = 5000;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<void*> blocks(kPerRound);
    std::thread producer([&] {
      for (int i = 0; i < kPerRound; ++i) {
        blocks[i] = pool_allocate(128);
        std::memset(blocks[i], round, 128);
      }
    });
    producer.join();
    std::thread consumer([&] {
      for (int i = 0; i < kPerRound; ++i) {
        ASSERT_EQ(static_cast<unsigned char*>(blocks[i])[127], round);
        pool_free(blocks[i], 128);
      }
    });
    consumer.join();
  }
}

}  // namespace
}  // namespace troupe::detail
