#include "checkpoint/consolidate.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/shard_file.h"
#include "nn/model/model.h"

namespace troupe::checkpoint {

absl::StatusOr<ConsolidatedWeights> consolidate(io::Env* env, const std::string& dir,
                                                std::optional<int64_t> step) {
  std::vector<std::string> skipped;
  int64_t below = std::numeric_limits<int64_t>::max();
  for (;;) {
    absl::StatusOr<FoundCheckpoint> found = find_checkpoint(env, dir, step, below);
    if (!found.ok()) {
      if (skipped.empty()) return found.status();
      return absl::NotFoundError(
          absl::StrCat(dir, ": no loadable checkpoint (", absl::StrJoin(skipped, "; "), ")"));
    }
    skipped.insert(skipped.end(), found->skipped.begin(), found->skipped.end());
    ConsolidatedWeights w{.step_dir = found->step_dir, .manifest = found->manifest};
    const int64_t n = static_cast<int64_t>(nn::model_layout(w.manifest.model).num_params());
    w.params.resize(static_cast<size_t>(n));
    absl::Status read = verify_checksums(env, w.step_dir, w.manifest);
    if (read.ok()) {
      read = read_state(env, w.step_dir, w.manifest, kParamState, w.manifest.model, {}, 0, n,
                        w.params.data());
    }
    if (read.ok()) {
      for (std::string& line : skipped)
        absl::StrAppend(&line, "; falling back to ", step_dir_name(w.manifest.step));
      w.skipped = std::move(skipped);
      return w;
    }
    if (step || !absl::IsDataLoss(read)) return read;
    skipped.push_back(std::string(read.message()));
    below = w.manifest.step;
  }
}

}  // namespace troupe::checkpoint
