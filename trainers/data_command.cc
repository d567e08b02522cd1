#include "trainers/data_command.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/data/addition_task.h"
#include "actors/data/llmc_format.h"
#include "actors/data/token_dataset.h"
#include "actors/data/token_dataset_writer.h"
#include "core/cluster/flags.h"
#include "text/byte_tokenizer.h"
#include "trainers/data_command_util.h"

namespace troupe::trainers {
namespace {

using data_cli::Arguments;
using data_cli::fail;
using data_cli::int_flag;
using data_cli::mib;
using data_cli::split_arguments;
using data_cli::usage;
using text::ByteTokenizer;

void print_overview() {
  std::printf(
      "usage: troupe data <prepare|synth|info|convert> [flags]\n\n"
      "Makes and inspects token datasets: PREFIX.bin (the tokens, uint16 or uint32)\n"
      "and PREFIX.json (the header), or llm.c's FILE.bin; see docs/data.md.\n\n"
      "  prepare  --output PREFIX [--tokenizer SPEC] [--val-files F,...] FILE...\n"
      "                                     tokens of text files, whole files held out\n"
      "  synth    --task addition ... --output PREFIX\n"
      "                                     a synthetic task's training set\n"
      "  info     PREFIX                    the header and sample counts\n"
      "  convert  PREFIX --to FORMAT --output OUT\n"
      "                                     to llm.c's format or from it\n\n"
      "Run `troupe data <subcommand> --help` for its flags.\n");
}

// ---- synth ------------------------------------------------------------------

int synth(const std::vector<std::string>& args) {
  auto flags = cluster::Flags::parse("data synth", args,
                                     {"task", "digits", "samples", "seq-len", "seed", "output"});
  if (!flags.ok()) return usage(std::string(flags.status().message()));
  if (flags->help()) {
    std::printf(
        "usage: troupe data synth --task addition [--digits 2] [--samples 100000]\n"
        "                         [--seq-len 64] [--seed 1] --output PREFIX\n\n"
        "Writes a synthetic task's training stream as a byte-level dataset: exactly\n"
        "SAMPLES samples of SEQ_LEN tokens. Task `addition`: lines \"a+b=c\\n\", a and b\n"
        "of DIGITS digits, c = a+b in DIGITS+1 digits written least significant digit\n"
        "first (07+35=240); problems held out for evaluation (by a hash of a, b and\n"
        "SEED) are never written. See docs/data.md.\n\n"
        "  --task     addition (the only task so far)\n"
        "  --digits   operand digits, 1 to 9\n"
        "  --samples  samples of SEQ_LEN tokens\n"
        "  --seq-len  T, the sample length the stream is sized for\n"
        "  --seed     the problems and the held-out split\n"
        "  --output   the dataset's prefix: PREFIX.bin and PREFIX.json are written\n");
    return 0;
  }
  const std::string task = flags->get("task", "addition");
  if (task != "addition") {
    return usage(absl::StrCat("troupe data synth: unknown task '", task, "' (known: addition)"));
  }
  const std::string prefix = flags->get("output");
  if (prefix.empty()) return usage("troupe data synth: --output PREFIX is required");
  auto digits = int_flag(*flags, "synth", "digits", 2, 1, 9);
  if (!digits.ok()) return usage(std::string(digits.status().message()));
  auto samples = int_flag(*flags, "synth", "samples", 100000, 1, int64_t{1} << 30);
  if (!samples.ok()) return usage(std::string(samples.status().message()));
  auto seq_len = int_flag(*flags, "synth", "seq-len", 64, 1, int64_t{1} << 20);
  if (!seq_len.ok()) return usage(std::string(seq_len.status().message()));
  uint64_t seed = 1;
  if (flags->has("seed") && !absl::SimpleAtoi(flags->get("seed"), &seed)) {
    return usage(absl::StrCat("troupe data synth: --seed ", flags->get("seed"),
                              ": expected a non-negative integer"));
  }
  const actors::AdditionTaskOptions options{.digits = static_cast<int>(*digits),
                                            .num_samples = *samples,
                                            .seed = seed,
                                            .seq_len = static_cast<int>(*seq_len)};
  if (absl::Status s = actors::validate(options); !s.ok()) {
    return usage(absl::StrCat("troupe data synth: ", s.message()));
  }
  absl::StatusOr<std::vector<int32_t>> tokens = actors::addition_training_tokens(options);
  if (!tokens.ok()) return fail(tokens.status());
  if (absl::Status s =
          actors::write_token_dataset(prefix, *tokens, text::ByteTokenizer::kVocabSize,
                                      text::ByteTokenizer::kName, actors::describe(options));
      !s.ok()) {
    return fail(s);
  }
  std::string example = text::ByteTokenizer::decode(*tokens);
  example.resize(std::min(example.find('\n'), example.size()));
  std::printf(
      "wrote %lld samples of seq_len %lld (%zu tokens) of addition, digits %lld, seed %llu\n"
      "  example line: %s\n"
      "  %s.bin\n"
      "  %s.json\n",
      static_cast<long long>(*samples), static_cast<long long>(*seq_len), tokens->size(),
      static_cast<long long>(*digits), static_cast<unsigned long long>(seed), example.c_str(),
      prefix.c_str(), prefix.c_str());
  return 0;
}

// ---- info -------------------------------------------------------------------

int info(const std::vector<std::string>& args) {
  Arguments split = split_arguments(args, {"check"});
  auto flags = cluster::Flags::parse("data info", split.flags, {"seq-len", "check"}, {"check"});
  if (!flags.ok()) return usage(std::string(flags.status().message()));
  if (flags->help()) {
    std::printf(
        "usage: troupe data info PREFIX [--seq-len T]... [--check]\n\n"
        "Prints the header of dataset PREFIX and how many samples it holds for each\n"
        "sequence length.\n\n"
        "  --seq-len  a sample length to count samples for (repeatable; default\n"
        "             64, 128, 256, 512 and 1024)\n"
        "  --check    read every token and check it is below vocab_size\n");
    return 0;
  }
  if (split.positional.size() != 1) {
    return usage("troupe data info: expected one dataset PREFIX (troupe data info PREFIX)");
  }
  std::vector<int64_t> seq_lens;
  for (const std::string& text : flags->all("seq-len")) {
    int64_t t = 0;
    if (!absl::SimpleAtoi(text, &t) || t < 1 || t > (int64_t{1} << 30)) {
      return usage(
          absl::StrCat("troupe data info: --seq-len ", text, ": expected a positive integer"));
    }
    seq_lens.push_back(t);
  }
  if (seq_lens.empty()) seq_lens = {64, 128, 256, 512, 1024};
  const std::string& prefix = split.positional[0];
  absl::StatusOr<actors::TokenDataset> data = actors::TokenDataset::open(prefix);
  if (!data.ok()) return fail(data.status());
  const actors::TokenDatasetHeader& h = data->header();
  const long long token_bytes = h.num_tokens * actors::dtype_bytes(h.dtype);
  std::string format = absl::StrCat(actors::kTokenFormat, " version ", actors::kTokenFormatVersion);
  std::string files = absl::StrCat(prefix, ".bin (", token_bytes, " bytes), ", prefix, ".json");
  if (const std::optional<actors::LlmcFormat> llmc = data->llmc_format(); llmc.has_value()) {
    const actors::LlmcFormatInfo& f = actors::llmc_format_info(*llmc);
    format = absl::StrCat("llm.c ", f.name, " (magic ", f.magic, ", version ", f.version, ")");
    files = absl::StrCat(prefix, " (", actors::kLlmcHeaderBytes + token_bytes, " bytes)");
  }
  std::printf(
      "dataset     %s\n"
      "format      %s\n"
      "dtype       %s\n"
      "vocab_size  %lld\n"
      "num_tokens  %lld\n"
      "tokenizer   %s\n"
      "source      %s\n"
      "files       %s\n",
      prefix.c_str(), format.c_str(), actors::dtype_name(h.dtype),
      static_cast<long long>(h.vocab_size), static_cast<long long>(h.num_tokens),
      h.tokenizer.c_str(), h.source.empty() ? "-" : h.source.c_str(), files.c_str());
  if (h.text_bytes > 0) {
    std::printf("text        %lld bytes, %.3f a token\n", static_cast<long long>(h.text_bytes),
                static_cast<double>(h.text_bytes) /
                    static_cast<double>(std::max<int64_t>(h.num_tokens, 1)));
  }
  for (int64_t t : seq_lens) {
    std::printf("samples     %lld of seq_len %lld\n",
                static_cast<long long>(data->num_samples(static_cast<int>(t))),
                static_cast<long long>(t));
  }
  if (flags->has("check")) {
    if (absl::Status s = data->check_tokens(); !s.ok()) return fail(s);
    std::printf("check       ok: every token is below vocab_size\n");
  }
  return 0;
}

// ---- convert ----------------------------------------------------------------

int convert(const std::vector<std::string>& args) {
  Arguments split = split_arguments(args, {});
  auto flags = cluster::Flags::parse("data convert", split.flags, {"to", "output"});
  if (!flags.ok()) return usage(std::string(flags.status().message()));
  if (flags->help()) {
    std::printf(
        "usage: troupe data convert DATASET --to FORMAT --output OUT\n\n"
        "Writes the tokens of DATASET (a PREFIX, or an llm.c FILE.bin) in another format:\n\n"
        "  --to llmc-gpt2    llm.c's file of GPT-2 tokens (uint16; magic 20240520), as its\n"
        "                    and nanoGPT-style data scripts write them: OUT is the file\n"
        "  --to llmc-llama3  llm.c's file of Llama 3 tokens (uint32; magic 20240801)\n"
        "  --to troupe       a troupe dataset: OUT is its PREFIX (OUT.bin and OUT.json)\n\n"
        "Every token is checked against the target's vocabulary; the output is written\n"
        "beside itself and renamed, so a failed conversion leaves nothing behind.\n");
    return 0;
  }
  if (split.positional.size() != 1) {
    return usage("troupe data convert: expected one DATASET (troupe data convert DATASET ...)");
  }
  const std::string to = flags->get("to");
  const std::string out = flags->get("output");
  if (out.empty()) return usage("troupe data convert: --output OUT is required");
  if (to != "llmc-gpt2" && to != "llmc-llama3" && to != "troupe") {
    return usage(absl::StrCat("troupe data convert: --to '", to,
                              "' is not llmc-gpt2, llmc-llama3 or troupe"));
  }
  absl::StatusOr<actors::TokenDataset> data = actors::TokenDataset::open(split.positional[0]);
  if (!data.ok()) return fail(data.status());
  if (to == "troupe") {
    const actors::TokenDatasetHeader& h = data->header();
    auto writer = actors::TokenDatasetWriter::create(out, h.vocab_size, h.tokenizer,
                                                     absl::StrCat("converted from ", data->name()));
    if (!writer.ok()) return fail(writer.status());
    absl::Status s = data->for_each_chunk(
        [&](int64_t, std::span<const int32_t> tokens) { return (*writer)->append(tokens); });
    if (s.ok()) s = (*writer)->finish();
    if (!s.ok()) return fail(s);
  } else {
    const actors::LlmcFormat format =
        to == "llmc-gpt2" ? actors::LlmcFormat::kGpt2 : actors::LlmcFormat::kLlama3;
    if (absl::Status s = actors::write_llmc_file(*data, format, out); !s.ok()) return fail(s);
  }
  std::printf("troupe data convert: %lld tokens of %s written to %s (%s)\n",
              static_cast<long long>(data->num_tokens()), data->name().c_str(), out.c_str(),
              to.c_str());
  return 0;
}

}  // namespace

int data_command(const std::vector<std::string>& args) {
  if (args.empty()) {
    print_overview();
    return 2;
  }
  const std::string& sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "prepare") return data_cli::prepare(rest);
  if (sub == "synth") return synth(rest);
  if (sub == "info") return info(rest);
  if (sub == "convert") return convert(rest);
  if (sub == "--help" || sub == "-h" || sub == "help") {
    print_overview();
    return 0;
  }
  std::fprintf(stderr, "troupe data: unknown subcommand '%s'\n\n", sub.c_str());
  print_overview();
  return 2;
}

}  // namespace troupe::trainers
