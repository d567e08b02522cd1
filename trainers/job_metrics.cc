#include "trainers/job_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "actors/pipeline/schedule.h"

namespace troupe::trainers {
namespace {

const std::vector<cluster::MetricHelp>& help() {
  static const auto* h = new std::vector<cluster::MetricHelp>{
      {"loss", "Mean training loss over the step's global batch."},
      {"learning_rate", "The learning rate the step applied (0 when it was skipped)."},
      {"grad_norm", "Global gradient norm, unscaled, before clipping."},
      {"loss_scale", "The loss scale the step ran with (fp16 dynamic scaling; 1 otherwise)."},
      {"step", "The step the values are of."},
      {"data_parallel_size", "Data-parallel replicas the step ran on (elasticity changes it)."},
      {"tokens_per_second", "Tokens of the global batch per second of the step."},
      {"model_flops_per_second", "Training FLOP/s of the model at this throughput."},
      {"mfu", "Model FLOPs utilization: model FLOP/s over the ranks' peak (0 when unknown)."},
      {"step_seconds",
       "Wall time of the step (part=total) and of its parts: the slowest stage's compute and "
       "exposed communication (waiting for reductions after backward), the optimizer's commit "
       "on the shards, and the rest (waiting)."},
      {"pipeline_bubble_ratio", "The pipeline's idle share of the step's schedule (pp > 1)."},
      {"memory_bytes", "What each rank holds, by category (peak_rss: its process's peak)."},
      {"sent_bytes", "Bytes each rank sent in the step, by collective."},
      {"validation_loss", "Mean loss over the validation split, at its last evaluation."},
      {"validation_bits_per_byte", "The validation loss in bits per byte of text."},
      {"checkpoint_seconds", "The last checkpoint's time from start to commit."},
      {"checkpoint_bytes", "The last checkpoint's size."},
      {"skipped_steps_total", "Steps skipped for an fp16 overflow."},
      {"recoveries_total", "Recoveries from a lost or hung rank."},
      {"recovery_seconds_total", "Time the recoveries took, detection to resumption."},
      {"steps_lost_total", "Steps run again after recoveries."},
      {"dp_changes_total", "Changes of the data-parallel size (elastic growth and shrinking)."},
      {"checkpoints_total", "Checkpoints committed."},
  };
  return *h;
}

}  // namespace

JobMetricsReporter::JobMetricsReporter(Send send, std::optional<FlopsModel> flops,
                                       int64_t rank_every)
    : send_(std::move(send)), flops_(flops), rank_every_(rank_every < 1 ? 1 : rank_every) {}

void JobMetricsReporter::gauge(std::string name, double value, std::string labels) {
  pending_.points.push_back({.name = std::move(name), .labels = std::move(labels), .value = value});
}

void JobMetricsReporter::send(int64_t step) {
  pending_.step = step;
  pending_.unix_seconds = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  gauge("step", static_cast<double>(step));
  gauge("skipped_steps_total", skipped_);
  gauge("recoveries_total", recoveries_);
  gauge("recovery_seconds_total", recovery_seconds_);
  gauge("steps_lost_total", steps_lost_);
  gauge("dp_changes_total", dp_changes_);
  gauge("checkpoints_total", checkpoints_);
  if (!help_sent_) {
    pending_.help = help();
    help_sent_ = true;
  }
  send_(std::exchange(pending_, {}));
}

void JobMetricsReporter::on_step(const StepOutcome& s) {
  if (!s.applied) ++skipped_;
  gauge("loss", s.loss);
  gauge("learning_rate", s.lr);
  gauge("grad_norm", s.grad_norm);
  gauge("loss_scale", s.loss_scale);
  gauge("data_parallel_size", s.dp);
  const double seconds = s.step_ms / 1000.0;
  const double tokens_per_s = seconds > 0 ? static_cast<double>(s.tokens) / seconds : 0;
  gauge("tokens_per_second", tokens_per_s);
  if (flops_) {
    gauge("model_flops_per_second", flops_->flops_per_s(tokens_per_s));
    gauge("mfu", flops_->mfu(tokens_per_s, s.dp));
  }
  gauge("step_seconds", seconds, "part=\"total\"");
  gauge("step_seconds", s.compute_ms / 1000.0, "part=\"compute\"");
  gauge("step_seconds", s.comm_exposed_ms / 1000.0, "part=\"exposed_communication\"");
  gauge("step_seconds", s.overhead_ms / 1000.0, "part=\"waiting\"");
  gauge("step_seconds", s.commit_ms / 1000.0, "part=\"commit\"");
  if (s.pipelined()) gauge("pipeline_bubble_ratio", s.bubble);
  const bool ranks = !ranks_sent_ || s.step % rank_every_ == 0;
  ranks_sent_ = true;
  for (const RankUsage& r : ranks ? s.ranks : std::vector<RankUsage>{}) {
    const std::string rank = absl::StrCat("rank=\"", actors::to_string(r.at), "\"");
    auto memory = [&](const char* category, int64_t bytes) {
      gauge("memory_bytes", static_cast<double>(bytes),
            absl::StrCat(rank, ",category=\"", category, "\""));
    };
    memory("parameters", r.memory.parameters);
    memory("gradients", r.memory.gradients);
    memory("optimizer_state", r.memory.optimizer_state);
    memory("buffers", r.memory.buffers);
    memory("activations", r.memory.activations);
    memory("peak_rss", r.memory.peak_rss);
    auto sent = [&](const char* collective, int64_t bytes) {
      gauge("sent_bytes", static_cast<double>(bytes),
            absl::StrCat(rank, ",collective=\"", collective, "\""));
    };
    sent("allreduce", r.sent.allreduce);
    sent("reduce_scatter", r.sent.reduce_scatter);
    sent("allgather", r.sent.allgather);
    sent("pipeline", r.sent.pipeline);
    sent("tensor_parallel", r.sent.tensor_parallel);
  }
  if (ranks) {
    // The schedule as each stage ran it, each from its own start (stages are processes of their
    // own: their clocks are not compared).
    for (const StageTimeline& t : s.timelines) {
      const std::string track = actors::to_string(t.at);
      for (const actors::TimelineEvent& e : t.events) {
        const auto op = static_cast<actors::pipeline::OpKind>(e.kind);
        pending_.timeline.push_back(
            {.track = track,
             .kind = std::string(actors::pipeline::op_kind_group(op)),
             .name = absl::StrCat(std::string(actors::pipeline::op_kind_name(op)), " ", e.micro),
             .begin_ms = e.begin_ms,
             .end_ms = e.end_ms});
      }
    }
  }
  if (!s.applied) pending_.events.push_back("skipped: the gradients overflowed in fp16");
  send(s.step);
}

void JobMetricsReporter::on_validation(int64_t step, const actors::ValidationResult& result) {
  gauge("validation_loss", result.loss());
  if (result.tokens_per_byte > 0) gauge("validation_bits_per_byte", result.bits_per_byte());
  pending_.events.push_back(absl::StrCat("validation loss ", result.loss()));
  send(step);
}

void JobMetricsReporter::on_recovery(const RecoveryReport& report) {
  ++recoveries_;
  recovery_seconds_ += report.total_ms / 1000.0;
  steps_lost_ += static_cast<double>(report.steps_lost);
  pending_.events.push_back(absl::StrCat("recovery: ", report.summary()));
}

void JobMetricsReporter::on_resize(const ResizeReport& report) {
  ++dp_changes_;
  pending_.events.push_back(absl::StrCat("resize: ", report.summary()));
}

void JobMetricsReporter::on_checkpoint(const CheckpointEvent& event) {
  if (!event.status.ok()) {
    pending_.events.push_back(
        absl::StrCat("checkpoint of step ", event.step, " failed: ", event.status.message()));
    return;
  }
  ++checkpoints_;
  gauge("checkpoint_seconds", event.total_ms / 1000.0);
  gauge("checkpoint_bytes", static_cast<double>(event.bytes));
  pending_.events.push_back(absl::StrCat("checkpoint of step ", event.step, " in ", event.step_dir,
                                         " (", event.bytes, " bytes)"));
}

}  // namespace troupe::trainers
