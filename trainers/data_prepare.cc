// troupe data prepare: text files to token datasets, with a tokenizer of the user's choosing and
// whole files held out for validation.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "actors/data/token_dataset_writer.h"
#include "text/file_text.h"
#include "text/parallel_encode.h"
#include "text/tokenizer.h"
#include "text/tokenizer_files.h"
#include "trainers/data_command_util.h"

namespace troupe::trainers::data_cli {
namespace {

// Files are read and encoded this many bytes at a time (a file larger than this, whole).
constexpr int64_t kBatchBytes = int64_t{64} << 20;

struct Input {
  std::string path;
  int64_t bytes = 0;
  dev_t device = 0;
  ino_t inode = 0;
};

absl::StatusOr<Input> stat_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read input ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat("input ", path, " is not a regular file"));
  return Input{path, static_cast<int64_t>(st.st_size), st.st_dev, st.st_ino};
}

std::string describe_files(const std::vector<Input>& files) {
  std::vector<std::string> names;
  for (size_t i = 0; i < files.size() && i < 8; ++i)
    names.push_back(files[i].path);
  if (files.size() > 8) names.push_back(absl::StrCat("and ", files.size() - 8, " more"));
  return absl::StrJoin(names, " ");
}

// The token a document starts with in a dataset: GPT-2's <|endoftext|> (as llm.c and nanoGPT
// write theirs), SentencePiece's BOS (as Llama trains); none between byte-level files, which are
// concatenated as they are.
std::optional<int32_t> document_start(const text::Tokenizer& tokenizer) {
  if (tokenizer.kind() == "gpt2") return tokenizer.end_of_text();
  if (tokenizer.kind() == "sentencepiece") return tokenizer.begin_of_text();
  return std::nullopt;
}

struct Written {
  int64_t tokens = 0;
  int64_t bytes = 0;
};

// Encodes `files` as one dataset at `prefix` (each file a document), its tokenizer's files in
// PREFIX.tokenizer/.
absl::StatusOr<Written> write_dataset(const std::string& prefix, const std::vector<Input>& files,
                                      const text::Tokenizer& tokenizer, int threads,
                                      const char* what) {
  auto writer = actors::TokenDatasetWriter::create(
      prefix, tokenizer.vocab_size(), tokenizer.id(),
      absl::StrCat("troupe data prepare: ", describe_files(files)));
  if (!writer.ok()) return writer.status();
  int64_t total = 0;
  for (const Input& f : files)
    total += f.bytes;
  const bool show_progress = total >= kProgressEvery;
  const std::optional<int32_t> start = document_start(tokenizer);
  Written written;
  for (size_t next = 0; next < files.size();) {
    // A batch of whole files, read, then encoded on every thread at once.
    std::vector<std::string> texts;
    int64_t batch_bytes = 0;
    while (next < files.size() &&
           (texts.empty() || batch_bytes + files[next].bytes <= kBatchBytes)) {
      auto text = text::read_file_text(files[next].path, size_t{1} << 40);
      if (!text.ok()) return text.status();
      batch_bytes += static_cast<int64_t>(text->size());
      texts.push_back(std::move(*text));
      ++next;
    }
    std::vector<absl::string_view> views(texts.begin(), texts.end());
    std::vector<std::vector<int32_t>> ids = text::encode_documents(tokenizer, views, threads);
    for (size_t d = 0; d < ids.size(); ++d) {
      if (start) ids[d].insert(ids[d].begin(), *start);
      if (absl::Status s = (*writer)->append(ids[d]); !s.ok()) return s;
      (*writer)->add_text_bytes(static_cast<int64_t>(texts[d].size()));
    }
    written.bytes += batch_bytes;
    if (show_progress) {
      std::fprintf(stderr, "\rtroupe data prepare: %s: %s of %s (%d%%)", what,
                   mib(written.bytes).c_str(), mib(total).c_str(),
                   static_cast<int>(100 * written.bytes / std::max<int64_t>(total, 1)));
    }
  }
  if (show_progress) std::fprintf(stderr, "\n");
  written.tokens = (*writer)->num_tokens();
  if (absl::Status s = (*writer)->finish(); !s.ok()) return s;
  if (absl::Status s = text::save_tokenizer(tokenizer, prefix + ".tokenizer"); !s.ok()) return s;
  return written;
}

void print_help() {
  std::printf(
      "usage: troupe data prepare --output PREFIX [--tokenizer SPEC] [--val-files F1,F2,...]\n"
      "                           [--val-output VPREFIX] [--threads N] FILE...\n\n"
      "Tokenizes text FILEs, each a document, in the order given, and writes the dataset\n"
      "PREFIX.bin (uint16 tokens for a vocabulary up to 65,536 ids, else uint32) and\n"
      "PREFIX.json, with the tokenizer's files in PREFIX.tokenizer/ so that a model trained\n"
      "on it carries them. GPT-2 datasets start each document with <|endoftext|> (as\n"
      "llm.c's and nanoGPT's do), SentencePiece ones with BOS; byte-level files are\n"
      "concatenated as they are. Files named in --val-files are held out whole: they go to\n"
      "the validation dataset only (PREFIX_val, or --val-output), so no window of them is\n"
      "ever trained on. Large inputs show progress on stderr.\n\n"
      "  --tokenizer   bytes (the default: a token per byte, vocab 256), gpt2:DIR (GPT-2's\n"
      "                encoder.json + vocab.bpe, vocab.json + merges.txt or tokenizer.json),\n"
      "                sentencepiece:FILE (a .model: Llama, Mistral)\n"
      "  --val-files   comma-separated files held out for validation (they may also be\n"
      "                among FILE...: they are taken out of training)\n"
      "  --val-output  the validation dataset's prefix (default PREFIX_val)\n"
      "  --threads     encoding threads (default: the CPUs)\n"
      "  --output      the training dataset's prefix\n\n"
      "  scripts/fetch_text.sh   # GPT-2's files, a SentencePiece model, Shakespeare\n"
      "  troupe data prepare --tokenizer gpt2:data/tokenizers/gpt2 \\\n"
      "      --val-files data/shakespeare/hamlet.txt --output data/shakespeare_gpt2 \\\n"
      "      data/shakespeare/*.txt\n");
}

}  // namespace

int prepare(const std::vector<std::string>& args) {
  Arguments split = split_arguments(args, {});
  auto flags = cluster::Flags::parse("data prepare", split.flags,
                                     {"output", "tokenizer", "val-files", "val-output", "threads"});
  if (!flags.ok()) return usage(std::string(flags.status().message()));
  if (flags->help()) {
    print_help();
    return 0;
  }
  const std::string prefix = flags->get("output");
  if (prefix.empty()) return usage("troupe data prepare: --output PREFIX is required");
  if (split.positional.empty() && !flags->has("val-files")) {
    return usage(
        "troupe data prepare: no input files (troupe data prepare --output PREFIX FILE...)");
  }
  const int cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto threads = int_flag(*flags, "prepare", "threads", cpus, 1, 1024);
  if (!threads.ok()) return usage(std::string(threads.status().message()));
  auto tokenizer = text::open_tokenizer(flags->get("tokenizer", "bytes"));
  if (!tokenizer.ok()) return fail(tokenizer.status());

  // Every input must be readable before anything is written.
  std::vector<Input> val;
  for (absl::string_view file : absl::StrSplit(flags->get("val-files"), ',', absl::SkipEmpty())) {
    auto input = stat_input(std::string(file));
    if (!input.ok()) return fail(input.status());
    val.push_back(*input);
  }
  auto held_out = [&](const Input& in) {
    return std::any_of(val.begin(), val.end(), [&](const Input& v) {
      return v.device == in.device && v.inode == in.inode;
    });
  };
  std::vector<Input> train;
  for (const std::string& file : split.positional) {
    auto input = stat_input(file);
    if (!input.ok()) return fail(input.status());
    if (!held_out(*input)) train.push_back(*input);
  }
  if (train.empty()) {
    return usage(
        "troupe data prepare: every input is held out for validation: nothing is left to train "
        "on");
  }

  const text::Tokenizer& tok = **tokenizer;
  auto written = write_dataset(prefix, train, tok, static_cast<int>(*threads), "train");
  if (!written.ok()) return fail(written.status());
  std::printf("wrote %lld tokens (%s, vocab %d) from %zu file%s: %.2f bytes a token\n",
              static_cast<long long>(written->tokens), tok.id().c_str(), tok.vocab_size(),
              train.size(), train.size() == 1 ? "" : "s",
              static_cast<double>(written->bytes) / std::max<int64_t>(written->tokens, 1));
  std::printf("  %s.bin\n  %s.json\n", prefix.c_str(), prefix.c_str());
  if (!tok.files().empty()) std::printf("  %s.tokenizer/\n", prefix.c_str());
  if (!val.empty()) {
    const std::string val_prefix = flags->get("val-output", prefix + "_val");
    auto val_written = write_dataset(val_prefix, val, tok, static_cast<int>(*threads), "val");
    if (!val_written.ok()) return fail(val_written.status());
    std::printf("held out for validation: %lld tokens from %zu file%s (%s)\n  %s.bin\n  %s.json\n",
                static_cast<long long>(val_written->tokens), val.size(), val.size() == 1 ? "" : "s",
                describe_files(val).c_str(), val_prefix.c_str(), val_prefix.c_str());
  }
  return 0;
}

}  // namespace troupe::trainers::data_cli
