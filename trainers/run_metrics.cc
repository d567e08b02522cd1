#include "trainers/run_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nn/cpu_peak.h"
#include "nn/model/flops.h"

namespace troupe::trainers {
namespace {

std::string bits_per_byte(const actors::ValidationResult& v) {
  return v.tokens_per_byte > 0 ? absl::StrFormat(" (%.4f bits/byte)", v.bits_per_byte())
                               : std::string();
}

}  // namespace

std::string ValidationTrack::summary(const CheckpointConfig& checkpoint) const {
  return absl::StrFormat(
      "validation loss %.4f%s at step %d; best %.4f at step %d%s", last->loss(),
      bits_per_byte(*last), last_step, best->loss(), best_step,
      checkpoint.keep_best ? absl::StrCat(" (kept: ", checkpoint.dir, "/best)") : "");
}

absl::StatusOr<bool> validate_and_report(Trainer& trainer, int64_t step, ProgressReporter& progress,
                                         std::optional<MetricsWriter>& metrics,
                                         ValidationTrack* track) {
  absl::StatusOr<actors::ValidationResult> result = trainer.validate();
  if (!result.ok()) {
    progress.message(absl::StrCat("validation failed: ", result.status().message()));
    return false;
  }
  const bool best = !track->best || result->loss() < track->best->loss();
  track->last = *result;
  track->last_step = step;
  if (best) {
    track->best = *result;
    track->best_step = step;
  }
  progress.set_validation_loss(result->loss());
  std::string line = absl::StrFormat("val at step %d: loss %.4f", step, result->loss());
  if (result->tokens_per_byte > 0) {
    absl::StrAppend(&line, absl::StrFormat(", %.4f bits/byte", result->bits_per_byte()));
  }
  absl::StrAppend(&line, absl::StrFormat(" (%d windows)%s", result->windows, best ? ", best" : ""));
  progress.message(line);
  if (metrics) {
    if (absl::Status s = metrics->write_validation(step, *result, best); !s.ok()) return s;
  }
  return best;
}

FlopsModel flops_model(const TrainConfig& config, int threads_per_rank, std::string* peak_note) {
  FlopsModel flops{
      .flops_per_token = nn::training_flops_per_token(config.model, config.model.max_seq_len()),
      .ranks_per_replica = config.parallel.pp * config.parallel.tp};
  if (config.training.peak_flops > 0) {
    flops.peak_per_rank = config.training.peak_flops;
    *peak_note = absl::StrCat(format_flops(flops.peak_per_rank), " a rank (training.peak_flops)");
  } else if (threads_per_rank > 0) {
    const nn::CpuPeak core = nn::cpu_sgemm_peak();
    flops.peak_per_rank = core.flops_per_s * threads_per_rank;
    *peak_note =
        absl::StrCat(format_flops(core.flops_per_s), " a core (SGEMM, ", core.source, ") x ",
                     threads_per_rank, threads_per_rank == 1 ? " thread" : " threads", " a rank");
  } else {
    *peak_note = "unknown on a running cluster: set training.peak_flops for MFU";
  }
  return flops;
}

}  // namespace troupe::trainers
