// What `troupe train` measures of a run besides its steps: the validation loss over the held-out
// split (the best so far and where), and the FLOPs model that turns tokens/s into model FLOP/s
// and MFU. train_command.cc drives them; progress.h shows and records them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "actors/validation.h"
#include "trainers/config.h"
#include "trainers/progress.h"
#include "trainers/trainer.h"

namespace troupe::trainers {

// The validation loss of the run so far: the latest and the best, and their steps.
struct ValidationTrack {
  std::optional<actors::ValidationResult> last;
  std::optional<actors::ValidationResult> best;
  int64_t last_step = 0;
  int64_t best_step = 0;

  // The summary's line: "validation loss 1.8978 (2.7380 bits/byte) at step 2000; best ...".
  // REQUIRES: last.
  std::string summary(const CheckpointConfig& checkpoint) const;
};

// Computes the validation loss at `step` and reports it: a line through `progress`, the progress
// lines' "val", a metrics line. Returns whether it is the best so far. Errors: those of writing
// the metrics (a failed validation is reported and training goes on).
absl::StatusOr<bool> validate_and_report(Trainer& trainer, int64_t step, ProgressReporter& progress,
                                         std::optional<MetricsWriter>& metrics,
                                         ValidationTrack* track);

// The FLOPs model of a run: training FLOPs per token of config.model at its sequence length, and
// the ranks' peak: training.peak_flops, or on a local cluster (`threads_per_rank` > 0) a core's
// measured SGEMM peak times the threads; unknown otherwise. *peak_note says which, for people.
FlopsModel flops_model(const TrainConfig& config, int threads_per_rank, std::string* peak_note);

}  // namespace troupe::trainers
