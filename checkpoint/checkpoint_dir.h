// A checkpoint directory: DIR/step-NNNNNNNN/ per checkpoint and DIR/latest,
// a pointer naming the newest complete one (docs/checkpoint.md).
//
// Saving step N, in this order (each file written to a temporary name,
// fsynced, renamed, and its directory fsynced):
//   begin_checkpoint     creates DIR/step-N/ (clearing what a failed attempt
//                        at N left there, or a step-N checkpoint that is
//                        corrupt)
//   owners               each writes its shard file into it (shard_file.h)
//   commit_checkpoint    writes manifest.json, then `latest`, then prunes all
//                        but the newest `keep`
// A checkpoint is complete once its manifest is there; a crash or an error at
// any point before leaves the previous checkpoint, and `latest`, as they were.
// A save that fails is abandoned (abandon_checkpoint: its directory goes);
// pruning removes what a crash left.
//
// Loading: find_checkpoint takes `latest`, or failing that the newest step-N
// with a manifest (then the others, newest first), decodes the manifest and checks the files are
// all there and of the right size; a candidate that fails is reported and the next older one tried.
// Checksums are checked as the owners read their state (shard_file.h); a mismatch there makes the
// caller ask for the checkpoint before it (`below`).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "core/io/env.h"

namespace troupe::checkpoint {

inline constexpr char kLatestFile[] = "latest";
// DIR/best: the step directory of the best validation loss so far (checkpoint.keep_best), which
// pruning keeps whatever `keep` says. Written as `latest` is.
inline constexpr char kBestFile[] = "best";
inline constexpr char kManifestFile[] = "manifest.json";

// "step-00000120".
std::string step_dir_name(int64_t step);
// DIR/step-NNNNNNNN.
std::string step_dir(const std::string& dir, int64_t step);
// The step of a name step_dir_name gives; nullopt for any other name.
std::optional<int64_t> parse_step_dir_name(const std::string& name);
// "shard-d0.p0.t0.bin".
std::string shard_file_name(const Owner& owner);
// What `latest` holds for step N: "step-NNNNNNNN XXH64\n", the xxh64 of the
// name, so that a flipped byte cannot make it name another checkpoint.
std::string latest_pointer(int64_t step);
// The step `latest` names; nullopt unless its checksum matches.
std::optional<int64_t> parse_latest_pointer(const std::string& text);

// AlreadyExists, touching nothing, when step N is complete, latest and
// verifies (verify_checkpoint). A step-N checkpoint that `latest` names but
// that fails verification (DataLoss: the one a resume fell back past) is
// replaced, as a failed attempt's leftovers are; an error that says nothing
// of its data (permissions, EIO) is returned, touching nothing. Checking
// reads the whole checkpoint, so it is done only when `latest` names step N.
// On an error creating DIR/step-N no empty directory is left.
absl::Status begin_checkpoint(io::Env* env, const std::string& dir, int64_t step);

// OK when DIR/step-N is loadable (as find_checkpoint checks) and every entry
// of every file matches its checksum (as loading reads it); DataLoss naming
// what does not.
absl::Status verify_checkpoint(io::Env* env, const std::string& dir, int64_t step);

// After a failed save of step N, when no owner is writing into it any more:
// removes DIR/step-N unless it holds a loadable checkpoint (a save that
// failed after its manifest was written is complete, and stays: it may be
// the only one). OK when there is nothing to remove.
absl::Status abandon_checkpoint(io::Env* env, const std::string& dir, int64_t step);

// Makes the checkpoint of manifest.step complete and latest, then prunes
// (keep >= 1; 0: no pruning, for a caller that prunes itself). Errors of
// writing the manifest or `latest` leave the previous checkpoint latest; an
// error while pruning is returned after the new checkpoint is complete (it
// is loadable either way).
absl::Status commit_checkpoint(io::Env* env, const std::string& dir, const Manifest& manifest,
                               int keep);

// Removes the loadable checkpoints older than the newest `keep` of those up
// to step `newest` (`newest` counts when it loads), and the step directories
// older than `newest` that hold no loadable checkpoint (no manifest, one
// that does not decode, a file missing or short). Directories from `newest`
// up (a save in progress) and ones that cannot be read for another reason
// than their data stay.
// The checkpoint DIR/best names is never removed.
absl::Status prune_checkpoints(io::Env* env, const std::string& dir, int64_t newest, int keep);

// Points DIR/best at step N's directory. Errors of the write.
absl::Status mark_best_checkpoint(io::Env* env, const std::string& dir, int64_t step);
// The step DIR/best names; nullopt when there is no such file or it names no step.
std::optional<int64_t> best_checkpoint(io::Env* env, const std::string& dir);

struct FoundCheckpoint {
  std::string step_dir;
  Manifest manifest;
  // One line for each newer candidate that was passed over, and why:
  // "step-00000120: shard-d1.p0.t0.bin is missing".
  std::vector<std::string> skipped;
};

// The newest loadable checkpoint in `dir` with a step below `below` (or
// exactly `step` when given). NotFound when there is none, naming the
// directory and, joined, the reasons each candidate was passed over. Only
// missing or corrupt data (DataLoss) passes a candidate over: another I/O
// error is returned as it is. `passed_over`: the reasons of newer
// checkpoints the caller already passed over (those whose files failed their
// checksums as they loaded), listed first in `skipped` and in the NotFound.
absl::StatusOr<FoundCheckpoint> find_checkpoint(io::Env* env, const std::string& dir,
                                                std::optional<int64_t> step = std::nullopt,
                                                int64_t below = std::numeric_limits<int64_t>::max(),
                                                std::vector<std::string> passed_over = {});

// The complete checkpoints in `dir` (those with a manifest), oldest first.
absl::StatusOr<std::vector<int64_t>> list_checkpoints(io::Env* env, const std::string& dir);

}  // namespace troupe::checkpoint
