// What the schedules share: their ops' names, their programs' communication,
// and the choice by name.
#include "actors/pipeline/schedule.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troupe::actors::pipeline {

absl::Status check_shape(int stages, int micro_batches) {
  if (stages < 1 || micro_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("a pipeline schedule needs stages >= 1 and ",
                                                   "micro-batches >= 1; got ", stages, " and ",
                                                   micro_batches));
  }
  return absl::OkStatus();
}

void add_forward(const Schedule& schedule, int stage, int micro, int chunk,
                 std::vector<PipelineOp>& program) {
  const int virtual_stage = chunk * schedule.stages + stage;
  const int last = schedule.chunks * schedule.stages - 1;
  if (virtual_stage > 0) program.push_back({OpKind::kRecvActivation, micro, chunk});
  program.push_back({OpKind::kForward, micro, chunk});
  if (virtual_stage < last) program.push_back({OpKind::kSendActivation, micro, chunk});
}

void add_backward(const Schedule& schedule, int stage, int micro, int chunk,
                  std::vector<PipelineOp>& program) {
  const int virtual_stage = chunk * schedule.stages + stage;
  const int last = schedule.chunks * schedule.stages - 1;
  if (virtual_stage < last) program.push_back({OpKind::kRecvGradient, micro, chunk});
  program.push_back({OpKind::kBackward, micro, chunk});
  if (virtual_stage > 0) program.push_back({OpKind::kSendGradient, micro, chunk});
}

absl::StatusOr<Schedule> make_schedule(ScheduleKind kind, int stages, int micro_batches,
                                       int chunks) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return gpipe(stages, micro_batches);
    case ScheduleKind::kOneFOneB:
      return one_f_one_b(stages, micro_batches);
    case ScheduleKind::kInterleaved:
      return interleaved_one_f_one_b(stages, micro_batches, chunks);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline schedule ", static_cast<int>(kind), " is not one of the schedules"));
}

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return "forward";
    case OpKind::kBackward:
      return "backward";
    case OpKind::kSendActivation:
      return "send activation";
    case OpKind::kRecvActivation:
      return "receive activation";
    case OpKind::kSendGradient:
      return "send gradient";
    case OpKind::kRecvGradient:
      return "receive gradient";
  }
  return "op";
}

std::string_view op_kind_group(OpKind kind) {
  const std::string_view name = op_kind_name(kind);
  return name.substr(0, name.find(' '));
}

std::string to_string(const PipelineOp& op, bool with_chunk) {
  const char* kind = "";
  switch (op.kind) {
    case OpKind::kForward:
      kind = "F";
      break;
    case OpKind::kBackward:
      kind = "B";
      break;
    case OpKind::kSendActivation:
      kind = "sendA";
      break;
    case OpKind::kRecvActivation:
      kind = "recvA";
      break;
    case OpKind::kSendGradient:
      kind = "sendG";
      break;
    case OpKind::kRecvGradient:
      kind = "recvG";
      break;
  }
  return with_chunk ? absl::StrCat(kind, op.micro, ".", op.chunk) : absl::StrCat(kind, op.micro);
}

namespace {

std::string describe_ops(const Schedule& schedule, bool compute_only) {
  std::string out;
  for (size_t s = 0; s < schedule.programs.size(); ++s) {
    absl::StrAppend(&out, "stage ", s, ":");
    for (const PipelineOp& op : schedule.programs[s]) {
      const bool compute = op.kind == OpKind::kForward || op.kind == OpKind::kBackward;
      if (!compute_only || compute) absl::StrAppend(&out, " ", to_string(op, schedule.chunks > 1));
    }
    out += "\n";
  }
  return out;
}

}  // namespace

std::string describe(const Schedule& schedule) {
  return describe_ops(schedule, false);
}

std::string describe_compute(const Schedule& schedule) {
  return describe_ops(schedule, true);
}

ChunkProgram chunk_program(const Schedule& schedule, int stage, int chunk) {
  ChunkProgram out;
  const std::vector<PipelineOp>& program = schedule.programs[static_cast<size_t>(stage)];
  for (size_t i = 0; i < program.size(); ++i) {
    if (program[i].chunk != chunk) continue;
    out.ops.push_back(program[i]);
    out.turns.push_back(i);
  }
  return out;
}

int most_held(const std::vector<PipelineOp>& ops) {
  int held = 0, most = 0;
  for (const PipelineOp& op : ops) {
    if (op.kind == OpKind::kForward) most = std::max(most, ++held);
    if (op.kind == OpKind::kBackward) --held;
  }
  return most;
}

double theoretical_bubble(int stages, int micro_batches, int chunks) {
  const double p = stages;
  return (p - 1) / (static_cast<double>(chunks) * micro_batches + p - 1);
}

}  // namespace troupe::actors::pipeline
