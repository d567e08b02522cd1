// troupe export: a checkpoint's weights as one safetensors file with Hugging
// Face GPT-2 names, for transformers' GPT2LMHeadModel (docs/checkpoint.md).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/consolidate.h"
#include "checkpoint/hf_gpt2.h"
#include "checkpoint/safetensors.h"
#include "core/cluster/flags.h"
#include "nn/memory.h"
#include "trainers/train_command.h"

namespace troupe::trainers {
namespace {

void print_export_help() {
  std::printf(
      "usage: troupe export --checkpoint DIR [--step N] --output FILE.safetensors\n\n"
      "Writes the weights of a checkpoint (the newest in DIR whose files pass their\n"
      "checksums, or step N) as one safetensors file with Hugging Face GPT-2 names\n"
      "(transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), the linear\n"
      "layers in GPT-2's Conv1D orientation, and the GPT2Config in its metadata\n"
      "(\"config\"). Any layout's checkpoint (dp, ZeRO stage) gives the same file.\n"
      "FILE is written as FILE.tmp and renamed over FILE: it must be a new path or a\n"
      "regular file (not a directory, a device or a symbolic link) outside DIR.\n\n"
      "  from transformers import GPT2Config, GPT2LMHeadModel\n"
      "  from safetensors import safe_open\n"
      "  import json, safetensors.torch\n"
      "  meta = safe_open(\"model.safetensors\", \"pt\").metadata()\n"
      "  model = GPT2LMHeadModel(GPT2Config(**json.loads(meta[\"config\"])))\n"
      "  model.load_state_dict(safetensors.torch.load_file(\"model.safetensors\"), "
      "strict=False)\n");
}

int fail(const std::string& text) {
  std::fprintf(stderr, "troupe export: %s\n", cluster::printable(text).c_str());
  return 1;
}

// What a file that is not a regular one is, for a message.
const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

// `path` as lstat sees it: nullopt when nothing is there; an error when it
// cannot be told.
absl::StatusOr<std::optional<struct stat>> look(const std::string& path) {
  struct stat st = {};
  if (::lstat(path.c_str(), &st) == 0) return std::optional<struct stat>(st);
  if (errno == ENOENT) return std::optional<struct stat>();
  return absl::InvalidArgumentError(
      absl::StrCat(path, " cannot be checked: ", std::strerror(errno)));
}

// Whether `dir` or one of the directories above it is the directory `inside`
// (by device and inode, so that symbolic links and bind mounts are seen
// through).
bool within(const std::filesystem::path& dir, const struct stat& inside) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(std::filesystem::absolute(dir), ec);
  if (ec) p = std::filesystem::absolute(dir, ec);
  for (;;) {
    struct stat st = {};
    if (::stat(p.c_str(), &st) == 0 && st.st_dev == inside.st_dev && st.st_ino == inside.st_ino)
      return true;
    if (p == p.parent_path() || p.empty()) return false;
    p = p.parent_path();
  }
}

// Export writes FILE.tmp and renames it over FILE, which replaces whatever
// FILE names: only a new path or a regular file may be replaced, never a
// device, a directory or a symbolic link (rename would replace the link, not
// what it points to), and nothing inside the checkpoint directory (a shard
// of the checkpoint being read). InvalidArgument saying which.
absl::Status check_output(const std::string& output, const std::string& checkpoint_dir) {
  if (output.empty()) {
    return absl::InvalidArgumentError(
        "--output is empty: it takes the path of the .safetensors file to write");
  }
  if (output.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("--output ", output, " names a directory; it takes the path of a file"));
  }
  absl::StatusOr<std::optional<struct stat>> at = look(output);
  if (!at.ok()) return absl::InvalidArgumentError(absl::StrCat("--output ", at.status().message()));
  if (*at && S_ISLNK((*at)->st_mode)) {
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::read_symlink(output, ec);
    return absl::InvalidArgumentError(absl::StrCat(
        "--output ", output, " is a symbolic link", ec ? "" : absl::StrCat(" to ", target.string()),
        "; export would replace the link itself, so it is refused: name the file it points to "
        "if that is the one to replace"));
  }
  if (*at && S_ISDIR((*at)->st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output ", output, " is a directory; it takes the path of the file to write (", output,
        "/model.safetensors, say)"));
  }
  if (*at && !S_ISREG((*at)->st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output ", output, " is ", file_kind((*at)->st_mode),
                     "; export writes only a regular file or a new path (it would replace ", output,
                     " with a file)"));
  }
  const std::filesystem::path parent = std::filesystem::path(output).parent_path();
  struct stat dir = {};
  if (::stat(checkpoint_dir.c_str(), &dir) == 0 && S_ISDIR(dir.st_mode) &&
      within(parent.empty() ? std::filesystem::path(".") : parent, dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output ", output, " is inside the checkpoint directory ", checkpoint_dir,
                     "; export writes its file outside it, so that it cannot replace a "
                     "checkpoint's own files"));
  }
  // The temporary file: only a stale regular one (an earlier export's) may
  // be there, and it is unlinked rather than truncated (it may be a link to
  // another file).
  const std::string tmp = output + ".tmp";
  absl::StatusOr<std::optional<struct stat>> stale = look(tmp);
  if (!stale.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output's temporary file ", stale.status().message()));
  }
  if (*stale && !S_ISREG((*stale)->st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(tmp, ", where export writes before renaming it to ", output, ", is ",
                     file_kind((*stale)->st_mode), "; move it away or name another --output"));
  }
  if (*stale && ::unlink(tmp.c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(tmp, " (a stale temporary file) cannot be removed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> parse_step_flag(const cluster::Flags& flags) {
  if (!flags.has("step")) return -1;
  int64_t step = 0;
  if (!absl::SimpleAtoi(flags.get("step"), &step) || step < 0) {
    return absl::InvalidArgumentError("--step takes a step number >= 0");
  }
  return step;
}

int export_command(const std::vector<std::string>& args) {
  auto flags = cluster::Flags::parse("export", args, {"checkpoint", "step", "output"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", cluster::printable(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help()) {
    print_export_help();
    return 0;
  }
  if (!flags->has("checkpoint") || !flags->has("output")) {
    std::fprintf(stderr, "troupe export: --checkpoint DIR and --output FILE are required\n");
    return 2;
  }
  absl::StatusOr<int64_t> step = parse_step_flag(*flags);
  if (!step.ok()) {
    std::fprintf(stderr, "troupe export: %s\n", std::string(step.status().message()).c_str());
    return 2;
  }
  const std::string output = flags->get("output");
  if (absl::Status s = check_output(output, flags->get("checkpoint")); !s.ok()) {
    std::fprintf(stderr, "troupe export: %s\n", cluster::printable(s.message()).c_str());
    return 2;
  }
  checkpoint::Env* env = checkpoint::Env::posix();
  absl::StatusOr<checkpoint::ConsolidatedWeights> weights = checkpoint::consolidate(
      env, flags->get("checkpoint"), *step >= 0 ? std::optional<int64_t>(*step) : std::nullopt);
  if (!weights.ok()) return fail(std::string(weights.status().message()));
  for (const std::string& line : weights->skipped)
    std::fprintf(stderr, "troupe export: %s\n", cluster::printable(line).c_str());
  const checkpoint::Manifest& m = weights->manifest;
  std::vector<checkpoint::SafeTensor> tensors =
      checkpoint::hf_gpt2_tensors(m.model, weights->params.data());
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},
      {"config", checkpoint::hf_gpt2_config_json(m.model)},
      {"troupe_step", absl::StrCat(m.step)},
      {"troupe_checkpoint", weights->step_dir}};
  if (absl::Status s = checkpoint::write_safetensors(env, output, tensors, metadata); !s.ok()) {
    return fail(std::string(s.message()));
  }
  int64_t values = 0;
  for (const checkpoint::SafeTensor& t : tensors)
    values += static_cast<int64_t>(t.data.size());
  std::printf("wrote %s: %zu tensors, %lld parameters (%s), GPT-2 names, from %s\n", output.c_str(),
              tensors.size(), static_cast<long long>(values), nn::format_bytes(values * 4).c_str(),
              weights->step_dir.c_str());
  return 0;
}

}  // namespace troupe::trainers
