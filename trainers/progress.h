// What a training run shows and records: a progress line per log interval
// (step/total, loss, learning rate, throughput, ETA; redrawn in place on a
// terminal), and one JSON line per step in a metrics file.
//
//   step  120/600  loss 1.2345  lr 2.95e-03  41.2k tok/s  1288 samples/s  comm hidden 86%  ETA
//   1m05s
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "actors/pipeline_stage_actor.h"
#include "trainers/checkpointer.h"
#include "trainers/elastic_scaler.h"
#include "trainers/recovery.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {

// Running totals over a run, for the progress line and the summary.
struct RunTotals {
  int64_t steps = 0;  // steps taken (applied or skipped)
  int64_t skipped = 0;
  int64_t samples = 0;
  int64_t tokens = 0;
  double seconds = 0;     // wall time of the steps
  double dp_seconds = 0;  // each step's wall time x its dp: replica-seconds (elasticity varies dp)
  double comm_ms = 0;     // summed over steps (slowest stage)
  double comm_exposed_ms = 0;
  double overhead_ms = 0;
  int64_t sent_bytes = 0;  // per rank (the largest), summed over steps
  double bubble_sum = 0;   // pp > 1: the steps' pipeline bubbles, summed
  int64_t pipelined = 0;   // the steps that had one
  // Per rank, the largest over the run of each: model state, buffers, peak RSS.
  actors::MemoryReport memory;
  // The fraction of communication time hidden behind compute (1 without communication; 0
  // when none is, though the exposed time, counted from the calls, may exceed the reductions').
  double comm_hidden() const {
    if (comm_ms <= 0) return 1.0;
    const double hidden = 1.0 - comm_exposed_ms / comm_ms;
    return hidden > 0 ? hidden : 0;
  }
  // The mean pipeline bubble over the steps (0 without a pipeline).
  double bubble() const { return pipelined > 0 ? bubble_sum / static_cast<double>(pipelined) : 0; }
  void add(const StepOutcome& step);
};

// What turns tokens/s into the numbers people compare: model FLOP/s (training FLOPs per token,
// nn/model/flops.h) and model FLOP utilisation against the ranks' peak.
struct FlopsModel {
  double flops_per_token = 0;  // 6 N + 12 L H Q T
  double peak_per_rank = 0;    // FLOP/s; 0: unknown (no MFU shown)
  int ranks_per_replica = 1;   // pp x tp: the ranks of one data-parallel replica
  // The ranks a step at data-parallel size dp runs on.
  int ranks(int dp) const { return dp * ranks_per_replica; }
  double flops_per_s(double tokens_per_s) const { return tokens_per_s * flops_per_token; }
  // In [0, 1] for an honest peak; 0 when the peak is unknown.
  double mfu(double tokens_per_s, int dp) const {
    return peak_per_rank > 0 ? flops_per_s(tokens_per_s) / (peak_per_rank * ranks(dp)) : 0;
  }
};

// "12.3 GFLOP/s", "1.05 TFLOP/s".
std::string format_flops(double flops_per_s);

class ProgressReporter {
 public:
  // Prints to `out` every `log_interval` steps (and the last); on a terminal
  // the line is redrawn in place.
  ProgressReporter(FILE* out, int64_t total_steps, int log_interval);

  void on_step(const StepOutcome& step);
  // A message on a line of its own (ends a line redrawn in place first).
  void message(const std::string& text);
  const RunTotals& totals() const { return totals_; }
  // The latest validation loss, shown on the progress lines from now on ("val 1.8123").
  void set_validation_loss(double loss) { validation_loss_ = loss; }
  // Shows tokens/s per rank and MFU on the progress lines from now on.
  void set_flops(const FlopsModel& flops) { flops_ = flops; }

 private:
  FILE* out_;
  bool tty_;
  bool open_line_ = false;
  int64_t total_steps_;
  int log_interval_;
  RunTotals totals_;
  RunTotals at_last_print_;
  std::optional<double> validation_loss_;
  std::optional<FlopsModel> flops_;
};

// "1h02m", "3m05s", "42s".
std::string format_duration(double seconds);

class MetricsWriter {
 public:
  // Opens `path` (truncating it, or appending to it: a resumed run),
  // creating its directory. Internal on failure.
  static absl::StatusOr<MetricsWriter> open(const std::string& path, bool append = false);
  MetricsWriter(MetricsWriter&& other) noexcept
      : file_(other.file_), path_(std::move(other.path_)), flops_(other.flops_) {
    other.file_ = nullptr;
  }
  MetricsWriter& operator=(MetricsWriter&&) = delete;
  ~MetricsWriter();

  // {"step":..,"loss":..,"lr":..,"grad_norm":..,"loss_scale":..,"applied":..,
  //  "samples":..,"tokens":..,"tokens_per_s":..,"step_ms":..,"compute_ms":..,
  //  "comm_ms":..,"comm_exposed_ms":..,"overhead_ms":..,"epoch":..,"data_position":..,
  //  "time": unix seconds when it was written}
  // Each line is flushed as it is written. Errors: Internal naming the file
  // and the reason (a full disk), after which nothing more is written.
  absl::Status write_step(const StepOutcome& step);
  // {"step":..,"eval":{"task":"addition","correct":..,"total":..,"accuracy":..}}
  absl::Status write_eval(int64_t step, const actors::EvalReport& report);
  // {"step":..,"val":{"loss":..,"bits_per_byte":..,"tokens":..,"windows":..,"best":..}}
  // (bits_per_byte left out when the dataset does not know its text bytes).
  absl::Status write_validation(int64_t step, const actors::ValidationResult& result, bool best);
  // Adds "tokens_per_s_per_rank", "model_flops_per_s" and "mfu" to every step line from now on.
  void set_flops(const FlopsModel& flops) { flops_ = flops; }
  // {"step":..,"checkpoint":{"dir":..,"ok":true,"bytes":..,"staging_ms":..,"write_ms":..,
  //  "total_ms":..,"waited_ms":..}}, or {"ok":false,"error":..}
  absl::Status write_checkpoint(const CheckpointEvent& event);
  // {"step":..,"resumed":{"dir":..,"bytes":..,"load_ms":..,"data_position":..,"skipped":[..]}}
  absl::Status write_resume(const LoadedCheckpoint& loaded);
  // {"step":..,"recovery":{"failure":..,"lost":[{"at":"d1.p0.t0","reason":..}],
  //  "restored":[..],"checkpoint_step":..,"steps_lost":..,"detect_ms":..,"replace_ms":..,
  //  "restore_ms":..,"total_ms":..}}
  absl::Status write_recovery(const RecoveryReport& report);
  // {"step":..,"resize":{"from_dp":..,"to_dp":..,"cause":..,"micro_batch":..,
  //  "grad_accum":..,"global_batch":..,"ms":..}}
  absl::Status write_resize(const ResizeReport& report);
  // Closes the file; its errors as write_step's.
  absl::Status close();

 private:
  MetricsWriter(FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  absl::Status write_line(const std::string& line);
  FILE* file_;
  std::string path_;
  std::optional<FlopsModel> flops_;
};

}  // namespace troupe::trainers
