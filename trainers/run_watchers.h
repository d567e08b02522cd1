// What watches a `troupe train` run besides its progress lines and its metrics file
// (docs/observability.md): the head's metrics and dashboard (JobMetricsReporter), a Perfetto
// trace (--trace: TraceWriter) and TensorBoard scalars (training.tensorboard_dir:
// TensorBoardWriter). The run calls these at each of its events; each watcher that fails (a full
// disk) costs its own output, said once through `say`, never the run.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/validation.h"
#include "core/cluster/cluster.h"
#include "trainers/job_metrics.h"
#include "trainers/tensorboard.h"
#include "trainers/trace.h"

namespace troupe::trainers {

struct RunWatchersOptions {
  Cluster* cluster = nullptr;  // where the job's values go, when report_metrics
  bool report_metrics = true;
  std::optional<FlopsModel> flops;
  int64_t rank_every = 1;       // per-rank values and timelines every this many steps
  std::string tensorboard_dir;  // empty: no TensorBoard
  std::string trace_path;       // empty: no trace
  TraceWindow trace_window;
};

class RunWatchers {
 public:
  // Errors: Internal naming the TensorBoard or trace file that cannot be created.
  static absl::StatusOr<std::unique_ptr<RunWatchers>> open(
      RunWatchersOptions options, std::function<void(const std::string&)> say);

  // For the run's header: where its trace and TensorBoard files are, a line each.
  std::vector<std::string> describe() const;
  // The time to hand to on_step and on_validation as when the work began.
  double now_us() const { return trace_ ? trace_->now_us() : 0; }

  void on_step(const StepOutcome& step, double began_us);
  void on_validation(int64_t step, const actors::ValidationResult& result, double began_us);
  void on_checkpoint(const CheckpointEvent& event);
  void on_recovery(const RecoveryReport& report);
  void on_resize(const ResizeReport& report);
  // Says whether the trace stopped short.
  void finish();

 private:
  RunWatchers(RunWatchersOptions options, std::function<void(const std::string&)> say);
  void send(cluster::MetricsReport report);

  RunWatchersOptions options_;
  std::function<void(const std::string&)> say_;
  std::optional<TensorBoardWriter> tensorboard_;
  bool tensorboard_failed_ = false;
  std::optional<TraceWriter> trace_;
  JobMetricsReporter reporter_;
};

}  // namespace troupe::trainers
