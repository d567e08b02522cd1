// The whole fp32 weights of a checkpoint, joined from its owners' files, for
// tools that run in one process (troupe export, troupe generate).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint_dir.h"
#include "core/io/env.h"

namespace troupe::checkpoint {

struct ConsolidatedWeights {
  std::string step_dir;
  Manifest manifest;
  std::vector<float> params;  // the model's flat buffer (nn/gpt_param_layout.h)
  // Newer checkpoints passed over, and why ("...; falling back to step-N").
  std::vector<std::string> skipped;
};

// The newest checkpoint in `dir` whose files all pass their checksums (or
// exactly `step`), its parameters joined. NotFound naming every reason when
// none does; DataLoss for `step` when its files fail.
absl::StatusOr<ConsolidatedWeights> consolidate(io::Env* env, const std::string& dir,
                                                std::optional<int64_t> step = std::nullopt);

}  // namespace troupe::checkpoint
