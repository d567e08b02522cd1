#include "checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checksum.h"
#include "checkpoint/shard_file.h"

namespace troupe::checkpoint {
namespace {

constexpr char kStepPrefix[] = "step-";

// A candidate checkpoint: its manifest decoded and its files present.
absl::StatusOr<Manifest> open_candidate(io::Env* env, const std::string& dir, int64_t step) {
  const std::string where = step_dir(dir, step);
  absl::StatusOr<std::string> text = env->read_file(where + "/" + kManifestFile);
  if (absl::IsNotFound(text.status())) {
    return absl::DataLossError(absl::StrCat(step_dir_name(step), ": ", kManifestFile,
                                            " is missing (an incomplete checkpoint)"));
  }
  if (!text.ok()) {
    // Corrupt (DataLoss: larger than a manifest) or not readable now (an I/O
    // error, no file descriptors, a stale NFS handle): only the former is
    // the checkpoint's fault - the latter keeps its code, so that nothing
    // prunes, replaces or skips a checkpoint for it.
    return absl::Status(text.status().code(),
                        absl::StrCat(step_dir_name(step), ": ", kManifestFile,
                                     " cannot be read: ", text.status().message()));
  }
  absl::StatusOr<Manifest> m =
      decode_manifest(*text, absl::StrCat(step_dir_name(step), ": ", kManifestFile));
  if (!m.ok()) return m.status();
  if (m->step != step) {
    return absl::DataLossError(
        absl::StrCat(step_dir_name(step), ": its manifest is of step ", m->step));
  }
  if (absl::Status s = check_files(env, where, *m); !s.ok()) return s;
  return m;
}

// Removes a checkpoint's directory, its manifest first, so that a crash
// part-way leaves a plainly incomplete directory, not a manifest without files.
absl::Status remove_checkpoint_dir(io::Env* env, const std::string& where) {
  const std::string manifest = where + "/" + kManifestFile;
  if (env->exists(manifest)) {
    if (absl::Status s = env->remove_file(manifest); !s.ok()) return s;
    if (absl::Status s = env->sync_dir(where); !s.ok()) return s;
  }
  return env->remove_dir(where);
}

}  // namespace

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return name;
}

std::string step_dir(const std::string& dir, int64_t step) {
  return absl::StrCat(dir, "/", step_dir_name(step));
}

std::optional<int64_t> parse_step_dir_name(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(digits, &step) || step_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string latest_pointer(int64_t step) {
  const std::string name = step_dir_name(step);
  return absl::StrCat(name, " ", hex64(xxh64(name.data(), name.size())), "\n");
}

std::optional<int64_t> parse_latest_pointer(const std::string& text) {
  const std::string line(absl::StripAsciiWhitespace(text));
  const size_t space = line.find(' ');
  if (space == std::string::npos) return std::nullopt;
  const std::string name = line.substr(0, space);
  if (line.substr(space + 1) != hex64(xxh64(name.data(), name.size()))) return std::nullopt;
  return parse_step_dir_name(name);
}

std::string shard_file_name(const Owner& owner) {
  return absl::StrCat("shard-", to_string(owner), ".bin");
}

absl::Status verify_checkpoint(io::Env* env, const std::string& dir, int64_t step) {
  absl::StatusOr<Manifest> m = open_candidate(env, dir, step);
  if (!m.ok()) return m.status();
  return verify_checksums(env, step_dir(dir, step), *m);
}

absl::Status begin_checkpoint(io::Env* env, const std::string& dir, int64_t step) {
  if (absl::Status s = env->create_dir(dir); !s.ok()) return s;
  const std::string where = step_dir(dir, step);
  // What a failed attempt at this step left may go, and so may a checkpoint
  // of this step that fails verification (loading passed it over for the
  // one before; a crash before the new one is complete leaves loading doing
  // the same). The checkpoint `latest` names, when it verifies, may not: a
  // crash before the new one is complete would leave nothing it names.
  if (absl::StatusOr<std::string> latest = env->read_file(dir + "/" + kLatestFile, 1024);
      latest.ok() && parse_latest_pointer(*latest) == step &&
      env->exists(where + "/" + kManifestFile)) {
    const absl::Status verified = verify_checkpoint(env, dir, step);
    if (verified.ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          step_dir_name(step), " is already saved and is latest; it is not written again"));
    }
    // Not corrupt, only unreadable now (permissions, an I/O error): it may
    // be good, so it stays, and this save fails with the reason.
    if (!absl::IsDataLoss(verified)) return verified;
  }
  if (absl::Status s = remove_checkpoint_dir(env, where); !s.ok()) return s;
  absl::Status made = env->create_dir(where);
  if (made.ok()) made = env->sync_dir(dir);
  if (!made.ok()) env->remove_dir(where).IgnoreError();  // no empty directory stays behind
  return made;
}

absl::Status abandon_checkpoint(io::Env* env, const std::string& dir, int64_t step) {
  const std::string where = step_dir(dir, step);
  if (!env->exists(where)) return absl::OkStatus();
  absl::StatusOr<Manifest> m = open_candidate(env, dir, step);
  if (m.ok()) return absl::OkStatus();  // complete: loadable, and pruned as any other
  if (!absl::IsDataLoss(m.status())) return m.status();  // cannot tell: it stays
  return remove_checkpoint_dir(env, where);
}

absl::StatusOr<std::vector<int64_t>> list_checkpoints(io::Env* env, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = env->children(dir);
  if (!names.ok()) return names.status();
  std::vector<int64_t> steps;
  for (const std::string& name : *names) {
    std::optional<int64_t> step = parse_step_dir_name(name);
    if (step && env->exists(absl::StrCat(dir, "/", name, "/", kManifestFile)))
      steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::Status commit_checkpoint(io::Env* env, const std::string& dir, const Manifest& manifest,
                               int keep) {
  const std::string where = step_dir(dir, manifest.step);
  const std::string text = encode_manifest(manifest);
  if (absl::Status s =
          io::write_file_atomically(env, where + "/" + kManifestFile, text.data(), text.size());
      !s.ok()) {
    return s;
  }
  const std::string pointer = latest_pointer(manifest.step);
  if (absl::Status s =
          io::write_file_atomically(env, dir + "/" + kLatestFile, pointer.data(), pointer.size());
      !s.ok()) {
    return s;
  }
  if (keep <= 0) return absl::OkStatus();
  return prune_checkpoints(env, dir, manifest.step, keep);
}

absl::Status prune_checkpoints(io::Env* env, const std::string& dir, int64_t newest, int keep) {
  // The newest `keep` loadable checkpoints up to `newest` stay; older ones,
  // and the directories older than it that hold no loadable checkpoint (a
  // failed, interrupted or corrupt save: no manifest, one that does not
  // decode, a file missing or short), go. A directory from `newest` up may be
  // a save in progress, and one that cannot be read now (not DataLoss) may
  // be good: they stay.
  absl::StatusOr<std::vector<std::string>> names = env->children(dir);
  if (!names.ok()) return names.status();
  std::vector<int64_t> complete;
  std::vector<int64_t> broken;
  for (const std::string& name : *names) {
    std::optional<int64_t> step = parse_step_dir_name(name);
    if (!step || *step >= newest) continue;
    absl::StatusOr<Manifest> m = open_candidate(env, dir, *step);
    if (m.ok()) {
      complete.push_back(*step);
    } else if (absl::IsDataLoss(m.status())) {
      broken.push_back(*step);
    }
  }
  // The best checkpoint (keep_best) stays, and is not one of the `keep`.
  if (std::optional<int64_t> best = best_checkpoint(env, dir)) {
    std::erase(complete, *best);
    std::erase(broken, *best);
  }
  std::sort(complete.begin(), complete.end());
  // `newest` is one of the `keep` when it loads; else `keep` older ones stay.
  const bool newest_loads = open_candidate(env, dir, newest).ok();
  const size_t keep_older = static_cast<size_t>(std::max(1, keep) - (newest_loads ? 1 : 0));
  std::vector<int64_t> doomed = broken;
  if (complete.size() > keep_older) {
    doomed.insert(doomed.end(), complete.begin(), complete.end() - keep_older);
  }
  absl::Status first;
  for (int64_t step : doomed)
    first.Update(remove_checkpoint_dir(env, step_dir(dir, step)));
  return first;
}

absl::Status mark_best_checkpoint(io::Env* env, const std::string& dir, int64_t step) {
  const std::string pointer = latest_pointer(step);
  return io::write_file_atomically(env, dir + "/" + kBestFile, pointer.data(), pointer.size());
}

std::optional<int64_t> best_checkpoint(io::Env* env, const std::string& dir) {
  absl::StatusOr<std::string> best = env->read_file(dir + "/" + kBestFile, 1024);
  if (!best.ok()) return std::nullopt;
  return parse_latest_pointer(*best);
}

absl::StatusOr<FoundCheckpoint> find_checkpoint(io::Env* env, const std::string& dir,
                                                std::optional<int64_t> step, int64_t below,
                                                std::vector<std::string> passed_over) {
  FoundCheckpoint found;
  found.skipped = std::move(passed_over);
  std::vector<int64_t> candidates;
  if (step) {
    candidates.push_back(*step);
  } else {
    // `latest` first; then every step directory, newest first.
    absl::StatusOr<std::string> latest = env->read_file(dir + "/" + kLatestFile, 1024);
    std::optional<int64_t> pointed;
    if (latest.ok()) {
      pointed = parse_latest_pointer(*latest);
      const std::string corrupt =
          absl::StrCat(kLatestFile,
                       ": corrupt (its checksum does not match); the newest checkpoint that "
                       "loads is used");
      // (Once: a caller asking again below a checkpoint passed it on already.)
      if (!pointed &&
          std::find(found.skipped.begin(), found.skipped.end(), corrupt) == found.skipped.end()) {
        found.skipped.push_back(corrupt);
      }
    }
    if (pointed && *pointed < below) candidates.push_back(*pointed);
    absl::StatusOr<std::vector<std::string>> names = env->children(dir);
    if (!names.ok()) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": no checkpoint directory (", names.status().message(), ")"));
    }
    std::vector<int64_t> steps;
    for (const std::string& name : *names) {
      std::optional<int64_t> s = parse_step_dir_name(name);
      if (s && *s < below && *s != pointed.value_or(-1)) steps.push_back(*s);
    }
    std::sort(steps.rbegin(), steps.rend());
    candidates.insert(candidates.end(), steps.begin(), steps.end());
  }
  for (int64_t s : candidates) {
    absl::StatusOr<Manifest> m = open_candidate(env, dir, s);
    if (m.ok()) {
      found.step_dir = step_dir(dir, s);
      found.manifest = *std::move(m);
      return found;
    }
    // Only missing or corrupt data moves on to an older checkpoint; an I/O
    // error is the reader's trouble, and an older checkpoint would hide it.
    if (!absl::IsDataLoss(m.status())) return m.status();
    found.skipped.push_back(std::string(m.status().message()));
  }
  return absl::NotFoundError(absl::StrCat(
      dir, ": no loadable checkpoint", step ? absl::StrCat(" of step ", *step) : "",
      found.skipped.empty() ? "" : absl::StrCat(" (", absl::StrJoin(found.skipped, "; "), ")")));
}

}  // namespace troupe::checkpoint
