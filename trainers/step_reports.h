// How the controller reads one step from its stages' reports (trainer_
// controller.h): pure bookkeeping, no actors, no clocks - a unit tested
// alone.
//
// The loss: the mean over the global batch, from the reports that hold it
// (the last pipeline stage; with tp > 1 only tensor slice 0's, since every
// slice computes the same loss). The gradient norm: the reports' owned ranges
// (actors/training_types.h, StepReport) grouped by (tensor slice, range); the
// replicas of a range must report bitwise the same squared norm (they hold
// the same reduced gradients) unless a gradient overflowed; the distinct
// ranges of each slice must tile [0, slice_params) without overlap; the
// squared norm is the sum over the distinct ranges, in (slice, begin) order.
// With tp > 1, parameters that every slice holds whole (norm weights,
// row-parallel biases) must count once: the stages that bring tensor
// parallelism report their squared norm on one slice only, as Megatron does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/training_types.h"

namespace troupe::trainers {

// What one rank held and sent in a step (an interleaved stage's chunks summed: one rank), at
// its coordinate (p: its pipeline stage, not its chunk).
struct RankUsage {
  actors::Coordinate at;
  actors::MemoryReport memory;
  actors::TrafficReport sent;
  // Its times in the step (ms), its chunks' summed: forward, backward, gradient reductions issue
  // to completion, the wait for them after backward, and the whole step on the stage.
  double forward_ms = 0, backward_ms = 0, comm_ms = 0, comm_exposed_ms = 0, step_ms = 0;
  // Its shard's update of step `updated_step` (the step before, reported late: the shard applies
  // it after the stage reported), chunks summed.
  int64_t updated_step = 0;
  double update_ms = 0;
};

struct StepTotals {
  double loss = 0;          // mean over the global batch (unscaled)
  double grad_norm_sq = 0;  // global, still multiplied by the loss scale
  bool found_inf = false;   // some owned gradient overflowed
  int64_t samples = 0;
  int64_t tokens = 0;
  std::vector<int64_t> sample_ids;  // the global batch's, in mesh order of the stages
  int64_t data_position = 0;        // the furthest loader position
  int64_t epoch = 0;
  // The slowest stage's times.
  double compute_ms = 0;
  double comm_ms = 0;
  double comm_exposed_ms = 0;
  double stage_ms = 0;
  // Per rank, the largest of every field over the ranks: memory held and
  // bytes sent in the step (an interleaved stage's chunks summed: one rank).
  actors::MemoryReport memory;
  actors::TrafficReport sent;
  // The same for each rank (d, stage, t), in mesh order.
  std::vector<RankUsage> ranks;
  // pp > 1: the pipeline's bubble, the stages' idle share of the schedule
  // (pipeline_bubble), averaged over the replicas; 0 otherwise.
  double bubble = 0;
};

// The pipelines' idle share in a step: for each replica (tensor slice 0,
// the stages that report a timeline), 1 - (its stages' forward and backward
// time) / (stages x the longest schedule_ms), averaged over the replicas,
// the chunks of an interleaved stage (StepReport::chunks) counting as one
// stage. 0 without a pipeline of two stages or more.
double pipeline_bubble(std::span<const actors::StepReport> reports);

// The totals of step `step` from every stage's report. Internal, naming the
// stages, when the reports contradict each other: a report of another step, no
// report holding the loss, replicas of a range with different norms, ranges
// that overlap or leave a gap.
absl::StatusOr<StepTotals> combine_reports(int64_t step,
                                           std::span<const actors::StepReport> reports);

}  // namespace troupe::trainers
