// Pipeline schedules (docs/design.md, "Training"): for each pipeline stage,
// the order in which it runs the forward and backward passes of a step's
// micro-batches and sends and receives their activations and gradients.
// One schedule a file (schedule_gpipe.cc, schedule_1f1b.cc,
// schedule_interleaved.cc), each a plain description that a stage actor
// follows and a test can print and check.
//
//   absl::StatusOr<Schedule> s = one_f_one_b(/*stages=*/4, /*micro_batches=*/8);
//   std::printf("%s", describe(*s).c_str());   // one line a stage
//   check_schedule(*s);                        // OK: runs without deadlock
//
// A stage may hold several chunks of the model (interleaved 1F1B: chunk c
// of stage s is virtual stage c * stages + s); the activations of virtual
// stage v go to virtual stage v + 1, and their gradients back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/pipeline/schedule_kind.h"

namespace troupe::actors::pipeline {

enum class OpKind {
  kForward,         // runs micro-batch `micro` through chunk `chunk`
  kBackward,        // and back
  kSendActivation,  // its output to the next virtual stage
  kRecvActivation,  // its input from the previous one
  kSendGradient,    // the gradient of its input to the previous one
  kRecvGradient,    // the gradient of its output from the next one
};

struct PipelineOp {
  OpKind kind = OpKind::kForward;
  int micro = 0;
  int chunk = 0;
  friend bool operator==(const PipelineOp&, const PipelineOp&) = default;
};

struct Schedule {
  std::string name;  // schedule_name(kind)
  int stages = 1;
  int micro_batches = 1;
  int chunks = 1;  // model chunks a stage holds (virtual stages a stage)
  // programs[s]: what stage s does in a step, in order.
  std::vector<std::vector<PipelineOp>> programs;
};

// GPipe: every forward, then every backward. Holds all m micro-batches'
// activations. InvalidArgument for stages or micro_batches below 1.
absl::StatusOr<Schedule> gpipe(int stages, int micro_batches);
// 1F1B (PipeDream-Flush, Megatron's default): stage s runs stages - s - 1
// forwards, then alternates one forward and one backward, then drains; it
// holds at most stages - s micro-batches' activations. As gpipe's errors.
absl::StatusOr<Schedule> one_f_one_b(int stages, int micro_batches);
// Interleaved 1F1B (Megatron's virtual pipeline): each stage holds `chunks`
// chunks, and micro-batches go round them in groups of `stages`; the bubble
// shrinks by `chunks`. InvalidArgument also for chunks below 2 or
// micro_batches not a multiple of stages (as Megatron requires).
absl::StatusOr<Schedule> interleaved_one_f_one_b(int stages, int micro_batches, int chunks);
// The schedule of `kind`; InvalidArgument for a value outside the enum, and the schedule's own
// errors.
absl::StatusOr<Schedule> make_schedule(ScheduleKind kind, int stages, int micro_batches,
                                       int chunks);

// An op's kind for people ("forward", "backward", "send activation", "receive activation",
// "send gradient", "receive gradient"), and its group ("forward", "backward", "send",
// "receive"): the timelines' and traces' names and colours.
std::string_view op_kind_name(OpKind kind);
std::string_view op_kind_group(OpKind kind);

// "F3.1" (forward of micro-batch 3 through chunk 1; chunk shown only when a
// stage holds several), "B3", "sendA3", "recvA3", "sendG3", "recvG3".
std::string to_string(const PipelineOp& op, bool with_chunk = false);
// One line a stage: "stage 0: F0 sendA0 F1 sendA1 ... ".
std::string describe(const Schedule& schedule);
// One line a stage with the compute ops only: "stage 0: F0 F1 B0 F2 B1 ...".
std::string describe_compute(const Schedule& schedule);

// What a run of the schedule shows, simulated with a forward taking
// `forward_cost` and a backward `backward_cost` (per chunk: a stage's chunk
// holds 1/chunks of its layers, and costs that share), sends not waiting
// and a receive waiting for its send.
struct ScheduleRun {
  double makespan = 0;        // from the first op to the last
  double bubble = 0;          // the stages' idle share of stages x makespan
  std::vector<int> held_max;  // per stage: the most micro-batch chunks forwarded, not yet back
};

// OK when every stage runs each micro-batch's forward and then its backward
// exactly once per chunk, every receive has its send (the same micro-batch
// and chunk, from the neighbouring virtual stage), and the stages run it to
// the end without deadlock; then `run` (if not null) says how it ran.
// FailedPrecondition naming the first op at fault otherwise.
absl::Status check_schedule(const Schedule& schedule, ScheduleRun* run = nullptr,
                            double forward_cost = 1, double backward_cost = 2);

// The bubble of GPipe and 1F1B, (p - 1) / (m + p - 1), and of interleaved
// 1F1B with v chunks, (p - 1) / (v m + p - 1): the idle share when forward
// and backward costs are the same on every stage.
double theoretical_bubble(int stages, int micro_batches, int chunks = 1);

// Appending one micro-batch's pass through one chunk of a stage, with its
// receive before and send after (none at the pipeline's ends): how the
// schedules write their programs.
void add_forward(const Schedule& schedule, int stage, int micro, int chunk,
                 std::vector<PipelineOp>& program);
void add_backward(const Schedule& schedule, int stage, int micro, int chunk,
                  std::vector<PipelineOp>& program);
// InvalidArgument unless stages and micro_batches are at least 1.
absl::Status check_shape(int stages, int micro_batches);

// What the actor of one chunk of a stage runs (interleaved 1F1B in the
// stages: each chunk is a stage actor of its own, virtual stage
// chunk x stages + stage): the ops of chunk `chunk` in the order of the
// stage's program, each with its position there - its turn among the
// chunks of the stage (actors/stage_turns.h). For a stage of one chunk, its
// whole program.
struct ChunkProgram {
  std::vector<PipelineOp> ops;
  std::vector<size_t> turns;  // ops[i] is op turns[i] of the stage's program
};
// REQUIRES: 0 <= stage < schedule.stages, 0 <= chunk < schedule.chunks.
ChunkProgram chunk_program(const Schedule& schedule, int stage, int chunk);
// The most micro-batches that `ops` hold at once: forwarded, not yet back.
int most_held(const std::vector<PipelineOp>& ops);

}  // namespace troupe::actors::pipeline
