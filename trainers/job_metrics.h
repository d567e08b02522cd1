// What a training job reports of itself to the head after each step (Cluster::report_metrics),
// shown on the head's /metrics as the troupe_train_ families (labelled job="<driver node>") and
// on its dashboard as curves and events. docs/observability.md lists every series:
//
//   loss, learning_rate, grad_norm, loss_scale, step, data_parallel_size     gauges
//   tokens_per_second, model_flops_per_second, mfu                            gauges
//   step_seconds{part="total|compute|exposed_communication|commit|waiting"}  gauges
//   pipeline_bubble_ratio                                                     gauge (pp > 1)
//   memory_bytes{rank="d0.p0.t0",category="parameters|gradients|optimizer_state|buffers|
//                activations|peak_rss"}                                       gauges
//   sent_bytes{rank=..,collective="allreduce|reduce_scatter|allgather|pipeline|
//              tensor_parallel"}                                              gauges, per step
//   validation_loss, validation_bits_per_byte                                 gauges
//   checkpoint_seconds, checkpoint_bytes                                      gauges (the last)
//   skipped_steps_total, recoveries_total, recovery_seconds_total,
//   steps_lost_total, dp_changes_total, checkpoints_total                     counters
//
// With the per-rank values goes the step's schedule as each stage ran it (the dashboard's
// timeline). The reporter gathers what happened between steps (a recovery, a resize, a checkpoint,
// a validation) and sends it with the next step's values; `send` must not block (the cluster's is
// a tell). Not thread-safe: the driver's step loop calls it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/validation.h"
#include "core/cluster/protocol.h"
#include "trainers/checkpointer.h"
#include "trainers/elastic_scaler.h"
#include "trainers/progress.h"
#include "trainers/recovery.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

class JobMetricsReporter {
 public:
  using Send = std::function<void(cluster::MetricsReport)>;
  // `flops`: the run's FLOPs model, for model FLOP/s and MFU (none: left out). The per-rank
  // values (memory_bytes, sent_bytes: 11 a rank) go with the first step and every
  // `rank_every`-th, so that a job of thousands of ranks does not send megabytes a step.
  JobMetricsReporter(Send send, std::optional<FlopsModel> flops, int64_t rank_every = 1);

  // A step ran (or was skipped): its values, and whatever happened since the last, sent now.
  void on_step(const StepOutcome& step);
  // Sent now, with the step it follows.
  void on_validation(int64_t step, const actors::ValidationResult& result);
  // Kept for the next step's report.
  void on_recovery(const RecoveryReport& report);
  void on_resize(const ResizeReport& report);
  void on_checkpoint(const CheckpointEvent& event);

 private:
  void gauge(std::string name, double value, std::string labels = "");
  void send(int64_t step);

  Send send_;
  std::optional<FlopsModel> flops_;
  cluster::MetricsReport pending_;
  int64_t rank_every_;
  bool help_sent_ = false;
  bool ranks_sent_ = false;
  // The counters' totals so far.
  double skipped_ = 0, recoveries_ = 0, recovery_seconds_ = 0, steps_lost_ = 0, dp_changes_ = 0,
         checkpoints_ = 0;
};

}  // namespace troupe::trainers
