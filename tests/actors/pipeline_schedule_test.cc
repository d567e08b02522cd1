// The pipeline schedules (actors/pipeline/schedule.h): each printed for
// small shapes matches its definition op for op; for p = 2, 4 and m = 4, 8
// each runs to the end without deadlock, 1F1B holds at most p - s
// micro-batches on stage s (GPipe all m), and the simulated bubble of
// GPipe and 1F1B is (p - 1) / (m + p - 1), interleaved 1F1B's
// (p - 1) / (v m + p - 1). A schedule out of order is caught, naming where.
#include "actors/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe::actors::pipeline {
namespace {

Schedule made(absl::StatusOr<Schedule> schedule) {
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{};
}

TEST(PipelineScheduleTest, GPipeRunsEveryForwardThenEveryBackward) {
  const Schedule s = made(gpipe(2, 4));
  EXPECT_EQ(describe_compute(s),
            "stage 0: F0 F1 F2 F3 B0 B1 B2 B3\n"
            "stage 1: F0 F1 F2 F3 B0 B1 B2 B3\n");
  EXPECT_EQ(describe(made(gpipe(2, 2))),
            "stage 0: F0 sendA0 F1 sendA1 recvG0 B0 recvG1 B1\n"
            "stage 1: recvA0 F0 recvA1 F1 B0 sendG0 B1 sendG1\n");
}

TEST(PipelineScheduleTest, OneFOneBWarmsUpAlternatesAndDrains) {
  EXPECT_EQ(describe_compute(made(one_f_one_b(2, 4))),
            "stage 0: F0 F1 B0 F2 B1 F3 B2 B3\n"
            "stage 1: F0 B0 F1 B1 F2 B2 F3 B3\n");
  EXPECT_EQ(describe_compute(made(one_f_one_b(4, 4))),
            "stage 0: F0 F1 F2 F3 B0 B1 B2 B3\n"
            "stage 1: F0 F1 F2 B0 F3 B1 B2 B3\n"
            "stage 2: F0 F1 B0 F2 B1 F3 B2 B3\n"
            "stage 3: F0 B0 F1 B1 F2 B2 F3 B3\n");
  EXPECT_EQ(describe(made(one_f_one_b(2, 2))),
            "stage 0: F0 sendA0 F1 sendA1 recvG0 B0 recvG1 B1\n"
            "stage 1: recvA0 F0 B0 sendG0 recvA1 F1 B1 sendG1\n");
}

TEST(PipelineScheduleTest, InterleavedGoesRoundTheChunksInGroupsOfStages) {
  // Megatron's order: forwards of chunk 0 for micro-batches 0, 1, then
  // chunk 1 for 0, 1, then the next group; backwards the chunks reversed.
  EXPECT_EQ(describe_compute(made(interleaved_one_f_one_b(2, 4, 2))),
            "stage 0: F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 "
            "B2.0 B3.0\n"
            "stage 1: F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
            "B2.0 B3.0\n");
}

TEST(PipelineScheduleTest, EveryScheduleRunsThroughHoldsWhatItShouldAndHasItsBubble) {
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      for (const char* name : {"gpipe", "1f1b", "interleaved"}) {
        const std::string what = absl::StrCat(name, ", p ", p, ", m ", m);
        const int v = std::string(name) == "interleaved" ? 2 : 1;
        const Schedule s = made(make_schedule(*parse_schedule(name), p, m, v));
        ScheduleRun run;
        ASSERT_TRUE(check_schedule(s, &run).ok()) << check_schedule(s) << "\n" << describe(s);
        const double theory = theoretical_bubble(p, m, v);
        EXPECT_NEAR(run.bubble, theory, 1e-9) << what;
        if (v > 1) {
          EXPECT_LT(run.bubble, theoretical_bubble(p, m)) << what << ": no better than 1F1B";
        }
        for (int stage = 0; stage < p; ++stage) {
          const int held = run.held_max[stage];
          if (std::string(name) == "gpipe") {
            EXPECT_EQ(held, m) << what;
          }
          if (std::string(name) == "1f1b") {
            EXPECT_EQ(held, std::min(p - stage, m)) << what << ", stage " << stage;
          }
        }
        std::printf("%s: bubble %.4f (theory %.4f), held per stage", what.c_str(), run.bubble,
                    theory);
        for (int held : run.held_max)
          std::printf(" %d", held);
        std::printf("\n");
      }
    }
  }
}

// Under interleaved 1F1B each chunk of a stage is an actor of its own: it
// runs its chunk's ops of the stage's program, in order, each at its turn
// (its position in the program), holding the micro-batches its own ops do.
TEST(PipelineScheduleTest, AChunkRunsItsOpsOfItsStagesProgramAtTheirTurns) {
  const Schedule s = made(interleaved_one_f_one_b(2, 4, 2));
  for (int stage = 0; stage < 2; ++stage) {
    std::vector<bool> covered(s.programs[stage].size(), false);
    for (int chunk = 0; chunk < 2; ++chunk) {
      const ChunkProgram c = chunk_program(s, stage, chunk);
      ASSERT_EQ(c.ops.size(), c.turns.size());
      for (size_t i = 0; i < c.ops.size(); ++i) {
        EXPECT_EQ(c.ops[i], s.programs[stage][c.turns[i]]);
        EXPECT_EQ(c.ops[i].chunk, chunk);
        if (i > 0) {
          EXPECT_LT(c.turns[i - 1], c.turns[i]);
        }
        covered[c.turns[i]] = true;
      }
    }
    EXPECT_TRUE(std::all_of(covered.begin(), covered.end(), [](bool b) { return b; }))
        << "stage " << stage << ": an op of no chunk";
  }
  // Stage 0, chunk 1 (virtual stage 2).
  const ChunkProgram one = chunk_program(s, 0, 1);
  std::string compute;
  for (const PipelineOp& op : one.ops) {
    if (op.kind == OpKind::kForward || op.kind == OpKind::kBackward) {
      absl::StrAppend(&compute, compute.empty() ? "" : " ", to_string(op, true));
    }
  }
  EXPECT_EQ(compute, "F0.1 F1.1 B0.1 B1.1 F2.1 F3.1 B2.1 B3.1");
  EXPECT_EQ(most_held(one.ops), 2);
  EXPECT_EQ(most_held(chunk_program(s, 0, 0).ops), 4);  // F0.0 .. F3.0 before B0.0
  // A stage of one chunk runs its whole program, and holds what check_schedule says.
  const Schedule flat = made(one_f_one_b(4, 8));
  ScheduleRun run;
  ASSERT_TRUE(check_schedule(flat, &run).ok());
  for (int stage = 0; stage < 4; ++stage) {
    const ChunkProgram whole = chunk_program(flat, stage, 0);
    EXPECT_EQ(whole.ops, flat.programs[stage]);
    EXPECT_EQ(most_held(whole.ops), run.held_max[stage]);
  }
}

TEST(PipelineScheduleTest, ShapesASchedulesCannotRunAreRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(gpipe(0, 4).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(one_f_one_b(2, 0).status()));
  absl::Status odd = interleaved_one_f_one_b(4, 6, 2).status();
  EXPECT_TRUE(absl::IsInvalidArgument(odd));
  EXPECT_TRUE(absl::StrContains(odd.message(), "multiple of the pipeline stages")) << odd;
  EXPECT_TRUE(absl::IsInvalidArgument(interleaved_one_f_one_b(2, 4, 1).status()));
  EXPECT_FALSE(parse_schedule("zb-h1").has_value());
  absl::Status unknown = make_schedule(static_cast<ScheduleKind>(7), 2, 4, 1).status();
  EXPECT_TRUE(absl::StrContains(unknown.message(), "pipeline schedule 7 is not one of the"))
      << unknown;
}

TEST(PipelineScheduleTest, AScheduleOutOfOrderIsCaughtNamingWhere) {
  // Stage 0 waits for a gradient before sending the activation it needs.
  Schedule deadlock = made(one_f_one_b(2, 2));
  std::vector<PipelineOp>& zero = deadlock.programs[0];
  std::rotate(zero.begin(), zero.begin() + 4, zero.begin() + 5);  // recvG0 first
  absl::Status s = check_schedule(deadlock);
  EXPECT_TRUE(absl::StrContains(s.message(), "deadlocks: stage 0 at recvG0, stage 1 at recvA0"))
      << s << "\n"
      << describe(deadlock);
  // A backward before its forward.
  Schedule backwards = made(gpipe(1, 2));
  std::swap(backwards.programs[0][0], backwards.programs[0][2]);
  s = check_schedule(backwards);
  EXPECT_TRUE(absl::StrContains(s.message(), "a backward before its forward")) << s;
  // A micro-batch left out.
  Schedule short_one = made(gpipe(1, 2));
  short_one.programs[0].pop_back();
  s = check_schedule(short_one);
  EXPECT_TRUE(absl::StrContains(s.message(), "2 forwards and 1 backwards")) << s;
}

}  // namespace
}  // namespace troupe::actors::pipeline
