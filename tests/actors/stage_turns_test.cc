// StageTurns (actors/stage_turns.h): the chunks of an interleaved stage, each
// on a thread of its own, run their ops in the order of the stage's program;
// a chunk absent or done with the step holds no one up; a waiting chunk gives
// up with go_on's error or at its deadline.
#include "actors/stage_turns.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "actors/pipeline/schedule.h"

namespace troupe::actors {
namespace {

using pipeline::ChunkProgram;
using pipeline::Schedule;

Schedule interleaved(int stages, int micro_batches, int chunks) {
  absl::StatusOr<Schedule> s = pipeline::interleaved_one_f_one_b(stages, micro_batches, chunks);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : Schedule{};
}

absl::Time soon() {
  return absl::Now() + absl::Seconds(30);
}

// Runs every chunk of `stage` on a thread of its own for `steps` steps and
// returns the positions of the ops in the order they ran.
std::vector<size_t> run_chunks(const Schedule& s, int stage, int steps) {
  auto turns = std::make_shared<StageTurns>(s.programs[stage]);
  std::mutex mu;
  std::vector<size_t> order;
  std::vector<std::thread> threads;
  for (int chunk = 0; chunk < s.chunks; ++chunk)
    turns->join(chunk);
  for (int chunk = 0; chunk < s.chunks; ++chunk) {
    threads.emplace_back([&, chunk] {
      const ChunkProgram c = pipeline::chunk_program(s, stage, chunk);
      for (int step = 1; step <= steps; ++step) {
        turns->begin(chunk, step);
        for (size_t turn : c.turns) {
          ASSERT_TRUE(turns->await(chunk, step, turn, nullptr, soon()).ok());
          {
            std::lock_guard<std::mutex> lock(mu);
            order.push_back(turn);
          }
          turns->ran(chunk, turn);
        }
        turns->end(chunk);
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  return order;
}

TEST(StageTurnsTest, TheChunksRunTheirOpsInTheOrderOfTheStagesProgram) {
  for (int stage = 0; stage < 4; ++stage) {
    const Schedule s = interleaved(4, 8, 3);
    const std::vector<size_t> order = run_chunks(s, stage, 3);
    const size_t n = s.programs[stage].size();
    ASSERT_EQ(order.size(), 3 * n);
    for (size_t i = 0; i < order.size(); ++i)
      ASSERT_EQ(order[i], i % n) << "stage " << stage << ", op " << i;
  }
}

TEST(StageTurnsTest, AnAbsentOrFinishedChunkHoldsNoOneUp) {
  const Schedule s = interleaved(2, 4, 2);
  const ChunkProgram one = pipeline::chunk_program(s, 0, 1);
  StageTurns turns(s.programs[0]);
  turns.join(1);
  // Chunk 0 never joined (placed elsewhere): chunk 1 runs its ops at once.
  turns.begin(1, 1);
  for (size_t turn : one.turns) {
    ASSERT_TRUE(turns.await(1, 1, turn, nullptr, soon()).ok());
    turns.ran(1, turn);
  }
  turns.end(1);
  // Chunk 0 joins, begins step 2 and fails before its first op: ended, it
  // holds chunk 1 up no more.
  turns.join(0);
  turns.begin(0, 2);
  turns.begin(1, 2);
  turns.end(0);
  EXPECT_TRUE(turns.await(1, 2, one.turns.back(), nullptr, soon()).ok());
}

TEST(StageTurnsTest, AWaitingChunkGivesUpWithGoOnsErrorOrAtItsDeadline) {
  const Schedule s = interleaved(2, 4, 2);
  const ChunkProgram one = pipeline::chunk_program(s, 0, 1);
  StageTurns turns(s.programs[0]);
  turns.join(0);
  turns.join(1);
  turns.begin(1, 1);  // chunk 0 has not begun step 1: chunk 1 waits for it
  int asked = 0;
  absl::Status s1 = turns.await(
      1, 1, one.turns[0],
      [&]() -> absl::Status {
        return ++asked < 3 ? absl::OkStatus() : absl::AbortedError("the pipe lost a stage");
      },
      soon());
  EXPECT_TRUE(absl::IsAborted(s1)) << s1;
  EXPECT_EQ(asked, 3);
  absl::Status s2 = turns.await(1, 1, one.turns[0], nullptr, absl::Now() + absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s2)) << s2;
  EXPECT_TRUE(absl::StrContains(s2.message(), "waited too long for its turn")) << s2;
}

}  // namespace
}  // namespace troupe::actors
