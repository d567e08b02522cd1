// troupe export: a checkpoint's weights as a Hugging Face model directory
// (config.json and model.safetensors, the architecture's names and layout:
// nn/model/hf.h) that transformers' AutoModelForCausalLM.from_pretrained
// loads as it is; or, for an --output ending in .safetensors, that one file
// with the config in its metadata (docs/models.md).
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
#include "absl/strings/str_join.h"
#include "checkpoint/consolidate.h"
#include "checkpoint/safetensors.h"
#include "core/cluster/flags.h"
#include "nn/memory.h"
#include "nn/model/hf.h"
#include "trainers/export_tokenizer.h"
#include "trainers/train_command.h"

namespace troupe::trainers {
namespace {

void print_export_help() {
  std::printf(
      "usage: troupe export --checkpoint DIR [--step N] --output OUT\n\n"
      "Writes the weights of a checkpoint (the newest in DIR whose files pass their\n"
      "checksums, or step N) as a Hugging Face model directory OUT: config.json and\n"
      "model.safetensors with transformers' names and layout (GPT2LMHeadModel's or\n"
      "LlamaForCausalLM's; the vocabulary's padding rows dropped). Any layout's\n"
      "checkpoint (dp, pp, tp, ZeRO stage) gives the same files.\n\n"
      "  from transformers import AutoModelForCausalLM\n"
      "  model = AutoModelForCausalLM.from_pretrained(\"OUT\")\n\n"
      "OUT is created if it is not there; it must not be a symbolic link or lie inside\n"
      "DIR. An OUT ending in .safetensors is one file instead, with config.json's text\n"
      "in its metadata (\"config\"). Each file is written beside itself and renamed.\n\n"
      "The tokenizer the model was trained with goes into OUT too, as AutoTokenizer reads\n"
      "it: GPT-2's vocab.json + merges.txt, or a SentencePiece tokenizer.model, with a\n"
      "tokenizer_config.json (none for a byte-level model); its id is in the weights'\n"
      "metadata (\"troupe_tokenizer\").\n");
}

int fail(const std::string& text) {
  std::fprintf(stderr, "troupe export: %s\n", cluster::printable(text).c_str());
  return 1;
}

// What a file that is not a regular one is, for a message.
const char* file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
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

// A model directory: outside the checkpoint directory (whatever is there, so
// that a file of the checkpoint is refused as such), a new path or a
// directory (not a link to one, not a file), created when missing; then each
// of its files as check_output says.
absl::Status prepare_output_dir(const std::string& dir, const std::string& checkpoint_dir,
                                const std::vector<std::string>& files) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("--output is empty: it takes the model directory to write");
  }
  struct stat checkpoint = {};
  if (::stat(checkpoint_dir.c_str(), &checkpoint) == 0 && S_ISDIR(checkpoint.st_mode)) {
    // The nearest existing directory at or above OUT decides.
    std::filesystem::path p = std::filesystem::absolute(dir);
    std::error_code ec;
    while (!std::filesystem::exists(p, ec) && p != p.parent_path())
      p = p.parent_path();
    if (within(p, checkpoint)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output ", dir, " is inside the checkpoint directory ", checkpoint_dir,
                       "; export writes outside it, so that it cannot replace a checkpoint's "
                       "own files"));
    }
  }
  absl::StatusOr<std::optional<struct stat>> at = look(dir);
  if (!at.ok()) return absl::InvalidArgumentError(absl::StrCat("--output ", at.status().message()));
  if (*at && S_ISLNK((*at)->st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--output ", dir, " is a symbolic link; name the directory it points to"));
  }
  if (*at && !S_ISDIR((*at)->st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--output ", dir, " is ", file_kind((*at)->st_mode),
        "; it takes a model directory (or a path ending in .safetensors for one file)"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--output ", dir, ": ", ec.message()));
  for (const std::string& file : files) {
    if (absl::Status s = check_output(dir + "/" + file, checkpoint_dir); !s.ok()) return s;
  }
  return absl::OkStatus();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
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
  const bool one_file = ends_with(output, ".safetensors");
  absl::Status ready = one_file ? check_output(output, flags->get("checkpoint"))
                                : prepare_output_dir(output, flags->get("checkpoint"),
                                                     {"model.safetensors", "config.json"});
  if (!ready.ok()) {
    std::fprintf(stderr, "troupe export: %s\n", cluster::printable(ready.message()).c_str());
    return 2;
  }
  io::Env* env = io::Env::posix();
  absl::StatusOr<checkpoint::ConsolidatedWeights> weights = checkpoint::consolidate(
      env, flags->get("checkpoint"), *step >= 0 ? std::optional<int64_t>(*step) : std::nullopt);
  if (!weights.ok()) return fail(std::string(weights.status().message()));
  for (const std::string& line : weights->skipped)
    std::fprintf(stderr, "troupe export: %s\n", cluster::printable(line).c_str());
  const checkpoint::Manifest& m = weights->manifest;
  const std::vector<nn::HfTensor> tensors = nn::hf_tensors(m.model, weights->params.data());
  const std::string config = nn::hf_config_json(m.model).dump(2) + "\n";
  std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                 {"troupe_step", absl::StrCat(m.step)},
                                                 {"troupe_checkpoint", weights->step_dir},
                                                 {"troupe_tokenizer", m.tokenizer}};
  if (one_file) metadata["config"] = config;
  const std::string weights_path = one_file ? output : output + "/model.safetensors";
  if (absl::Status s = checkpoint::write_safetensors(env, weights_path, tensors, metadata);
      !s.ok()) {
    return fail(std::string(s.message()));
  }
  if (!one_file) {
    if (absl::Status s =
            io::write_file_atomically(env, output + "/config.json", config.data(), config.size());
        !s.ok()) {
      return fail(std::string(s.message()));
    }
  }
  // The tokenizer the model was trained with, as AutoTokenizer reads it (a model directory only).
  std::string tokenizer_note;
  if (!one_file && m.tokenizer != "bytes") {
    absl::StatusOr<std::vector<std::string>> files = export_tokenizer(
        flags->get("checkpoint") + "/tokenizer", m.tokenizer, m.model.max_seq_len(), output,
        [&](const std::string& path) { return check_output(path, flags->get("checkpoint")); });
    if (!files.ok()) {
      std::fprintf(stderr, "troupe export: the tokenizer (%s) is not exported: %s\n",
                   m.tokenizer.c_str(), cluster::printable(files.status().message()).c_str());
    } else {
      tokenizer_note = absl::StrCat("; tokenizer ", m.tokenizer, ": ", absl::StrJoin(*files, ", "));
    }
  }
  int64_t values = 0;
  for (const nn::HfTensor& t : tensors)
    values += static_cast<int64_t>(t.data.size());
  std::printf("wrote %s: %zu tensors, %lld parameters (%s), %s, from %s%s\n", output.c_str(),
              tensors.size(), static_cast<long long>(values), nn::format_bytes(values * 4).c_str(),
              nn::architecture_name(m.model.architecture()), weights->step_dir.c_str(),
              tokenizer_note.c_str());
  return 0;
}

}  // namespace troupe::trainers
