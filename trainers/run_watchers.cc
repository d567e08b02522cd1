#include "trainers/run_watchers.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe::trainers {

RunWatchers::RunWatchers(RunWatchersOptions options, std::function<void(const std::string&)> say)
    : options_(std::move(options)),
      say_(std::move(say)),
      reporter_([this](cluster::MetricsReport r) { send(std::move(r)); }, options_.flops,
                options_.rank_every) {}

absl::StatusOr<std::unique_ptr<RunWatchers>> RunWatchers::open(
    RunWatchersOptions options, std::function<void(const std::string&)> say) {
  std::unique_ptr<RunWatchers> w(new RunWatchers(std::move(options), std::move(say)));
  if (!w->options_.tensorboard_dir.empty()) {
    absl::StatusOr<TensorBoardWriter> tb = TensorBoardWriter::open(w->options_.tensorboard_dir);
    if (!tb.ok()) return tb.status();
    w->tensorboard_.emplace(*std::move(tb));
  }
  if (!w->options_.trace_path.empty()) {
    absl::StatusOr<TraceWriter> trace =
        TraceWriter::open(w->options_.trace_path, w->options_.trace_window);
    if (!trace.ok()) return trace.status();
    w->trace_.emplace(*std::move(trace));
  }
  return w;
}

std::vector<std::string> RunWatchers::describe() const {
  std::vector<std::string> lines;
  if (tensorboard_) {
    lines.push_back(absl::StrCat("TensorBoard: ", tensorboard_->path(), " (tensorboard --logdir ",
                                 options_.tensorboard_dir, ")"));
  }
  if (trace_)
    lines.push_back(absl::StrCat("trace: ", trace_->path(), " (open it in ui.perfetto.dev)"));
  return lines;
}

void RunWatchers::send(cluster::MetricsReport report) {
  if (tensorboard_ && !tensorboard_failed_) {
    if (absl::Status s = tensorboard_->report(report); !s.ok()) {
      tensorboard_failed_ = true;
      say_(absl::StrCat(s.message(), "; training goes on without TensorBoard's scalars"));
    }
  }
  if (options_.report_metrics && options_.cluster != nullptr) {
    options_.cluster->report_metrics(std::move(report));
  }
}

void RunWatchers::on_step(const StepOutcome& step, double began_us) {
  reporter_.on_step(step);
  if (trace_) trace_->step(step, began_us, trace_->now_us());
}

void RunWatchers::on_validation(int64_t step, const actors::ValidationResult& result,
                                double began_us) {
  reporter_.on_validation(step, result);
  if (trace_) trace_->validation(step, result.loss(), began_us, trace_->now_us());
}

void RunWatchers::on_checkpoint(const CheckpointEvent& event) {
  reporter_.on_checkpoint(event);
  if (trace_) trace_->checkpoint(event, trace_->now_us());
}

void RunWatchers::on_recovery(const RecoveryReport& report) {
  reporter_.on_recovery(report);
  if (trace_) trace_->recovery(report, trace_->now_us());
}

void RunWatchers::on_resize(const ResizeReport& report) {
  reporter_.on_resize(report);
  if (trace_) trace_->resize(report, trace_->now_us());
}

void RunWatchers::finish() {
  if (trace_ && !trace_->status().ok()) {
    say_(absl::StrCat(trace_->status().message(), "; the trace ends where the writing failed"));
  }
}

}  // namespace troupe::trainers
