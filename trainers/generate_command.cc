// troupe generate: samples text from weights that `troupe train` saved, in
// this process (no cluster needed).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actors/generation.h"
#include "checkpoint/consolidate.h"
#include "core/cluster/flags.h"
#include "nn/model/model.h"
#include "text/tokenizer.h"
#include "text/tokenizer_files.h"
#include "trainers/model_file.h"
#include "trainers/train_command.h"

namespace troupe::trainers {
namespace {

// The most tokens one generate call produces (--max-new-tokens).
constexpr int kMaxNewTokens = 1 << 16;

void print_generate_help() {
  std::printf(
      "usage: troupe generate (--model DIR | --checkpoint DIR [--step N]) --prompt TEXT\n"
      "                       [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
      "                       [--seed S] [--no-stop] [--no-kv-cache] [--tokenizer SPEC]\n\n"
      "Continues TEXT with the model saved in DIR (--model: DIR/model.json + model.bin, as\n"
      "troupe train writes them; --checkpoint: the newest checkpoint in DIR whose files\n"
      "pass their checksums, or step N), the prompt at the start of the context. The text\n"
      "is encoded and decoded with the tokenizer the model was trained with, saved beside\n"
      "it (DIR/tokenizer; --tokenizer SPEC names it where it is not, and is refused if it\n"
      "is another). Generation stops at the end of the text (the end-of-text token; a\n"
      "newline for a byte-level model; unless --no-stop) or after N new tokens\n"
      "(--max-new-tokens, or its alias --max-tokens; default 32, at most %d).\n\n"
      "Temperature 0 (the default) is greedy decoding; T goes up to 3.4e38, the largest\n"
      "float (from about 1e3 up every token is about equally likely). With T > 0 the\n"
      "tokens are drawn from the K most likely (--top-k; 0, the default, keeps all), then\n"
      "from the fewest most likely whose probabilities sum to at least P (--top-p, in\n"
      "(0, 1]; 1, the default, keeps all), as Hugging Face's generate does; --seed S\n"
      "makes the draws repeatable.\n\n"
      "The prompt runs once and each new token costs one position (a KV cache); once\n"
      "the context outgrows the model's max sequence length each token runs the model\n"
      "over the last max_seq_len tokens. --no-kv-cache runs the whole context for every\n"
      "token (the same greedy tokens, slower).\n\n"
      "  troupe generate --model runs/train-1234-5678 --prompt \"12+34=\"\n",
      kMaxNewTokens);
}

// The sampler divides the logits by the temperature in single precision
// (actors/generation.h): any float from 0 (greedy) to the largest float
// works; from about 1e3 up, every token is about equally likely.
absl::StatusOr<float> parse_temperature(const std::string& text) {
  constexpr double kLargest = std::numeric_limits<float>::max();
  const std::string range = absl::StrFormat("it takes a number from 0 (greedy) to %g", kLargest);
  const std::string shown = cluster::printable(text);
  errno = 0;
  char* end = nullptr;
  const double t = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", shown, " is not a number; ", range));
  }
  // inf and nan are written as such; a number past double's range is finite
  // (strtod gives HUGE_VAL and says ERANGE).
  if (std::isnan(t) || (std::isinf(t) && errno != ERANGE)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", shown, " is not a finite number; ", range));
  }
  if (t < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", shown, " is below 0; ", range));
  }
  if (t > kLargest) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--temperature %s is over %g, the largest the sampler takes (it divides "
                        "the logits by it in single precision)",
                        shown, kLargest));
  }
  return static_cast<float>(t);  // (below float's smallest: 0, greedy)
}

// --top-k: a whole number from 0 (off) up; above the vocabulary's size it keeps every token.
absl::StatusOr<int> parse_top_k(const std::string& text) {
  int k = 0;
  if (!absl::SimpleAtoi(text, &k) || k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-k ", cluster::printable(text),
                     " is not a whole number >= 0; it takes how many of the most likely tokens "
                     "to draw from (0: all)"));
  }
  return k;
}

// --top-p: a number in (0, 1]; 1 keeps every token.
absl::StatusOr<float> parse_top_p(const std::string& text) {
  const std::string range =
      "it takes a number in (0, 1], the probability mass of the most likely tokens to draw from "
      "(1: all)";
  const std::string shown = cluster::printable(text);
  char* end = nullptr;
  const double p = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--top-p ", shown, " is not a number; ", range));
  }
  if (!std::isfinite(p)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-p ", shown, " is not a finite number; ", range));
  }
  if (p <= 0 || p > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-p ", shown, " is outside (0, 1]; ", range));
  }
  return static_cast<float>(p);
}

int fail(const std::string& text) {
  std::fprintf(stderr, "troupe generate: %s\n", cluster::printable(text).c_str());
  return 1;
}

// A checkpoint's weights as a saved model, with the id of its tokenizer.
absl::StatusOr<SavedModel> load_checkpoint_model(const std::string& dir, int64_t step) {
  absl::StatusOr<checkpoint::ConsolidatedWeights> w = checkpoint::consolidate(
      io::Env::posix(), dir, step >= 0 ? std::optional<int64_t>(step) : std::nullopt);
  if (!w.ok()) return w.status();
  for (const std::string& line : w->skipped)
    std::fprintf(stderr, "troupe generate: %s\n", cluster::printable(line).c_str());
  return SavedModel{.model = w->manifest.model,
                    .params = std::move(w->params),
                    .step = w->manifest.step,
                    .tokenizer = w->manifest.tokenizer};
}

// The tokenizer the model was trained with: `spec` when given (refused unless it is that one),
// else the one saved beside the weights (DIR/tokenizer, checked against the recorded id).
absl::StatusOr<std::unique_ptr<text::Tokenizer>> model_tokenizer(const SavedModel& saved,
                                                                 const std::string& dir,
                                                                 const std::string& spec) {
  const std::string& id = saved.tokenizer;
  // A dataset that names only its tokenizer's kind (an llm.c file: "gpt2") has no files to check
  // against: --tokenizer must give one of that kind.
  const bool kind_only = id != "bytes" && id.find('-') == std::string::npos;
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tok =
      !spec.empty() ? text::open_tokenizer(spec)
      : kind_only ? absl::StatusOr<std::unique_ptr<text::Tokenizer>>(absl::FailedPreconditionError(
                        absl::StrCat("the model was trained on ", id,
                                     " tokens from a file that names no vocabulary; give it with "
                                     "--tokenizer ",
                                     id, ":DIR")))
                  : text::open_saved_tokenizer(absl::StrCat(dir, "/tokenizer"), id);
  if (!tok.ok()) return tok.status();
  const bool same = kind_only ? (*tok)->kind() == text::tokenizer_kind(id) : (*tok)->id() == id;
  if (!same) {
    return absl::FailedPreconditionError(
        absl::StrCat("the model was trained with tokenizer ", id, ", not ", (*tok)->id(),
                     ": its ids would be read as another vocabulary's"));
  }
  // (A byte-level model may hold fewer ids than 256: its prompt's bytes are checked instead.)
  if (id != "bytes" && (*tok)->vocab_size() > saved.model.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat("tokenizer ", (*tok)->id(), " has ",
                                                      (*tok)->vocab_size(), " ids, the model only ",
                                                      saved.model.vocab_size()));
  }
  return tok;
}

}  // namespace

int generate_command(const std::vector<std::string>& args) {
  auto flags = cluster::Flags::parse(
      "generate", args,
      {"model", "checkpoint", "step", "prompt", "max-new-tokens", "max-tokens", "temperature",
       "top-k", "top-p", "seed", "no-stop", "no-kv-cache", "tokenizer"},
      {"no-stop", "no-kv-cache"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  if (flags->help()) {
    print_generate_help();
    return 0;
  }
  if (flags->has("model") == flags->has("checkpoint") || !flags->has("prompt")) {
    std::fprintf(stderr,
                 "troupe generate: --prompt TEXT and one of --model DIR or --checkpoint DIR are "
                 "required\n");
    return 2;
  }
  absl::StatusOr<int64_t> step = parse_step_flag(*flags);
  if (!step.ok() || (*step >= 0 && !flags->has("checkpoint"))) {
    std::fprintf(stderr, "troupe generate: --step takes a step number >= 0, with --checkpoint\n");
    return 2;
  }
  int max_tokens = 32;
  float temperature = 0;
  int top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  if (flags->has("max-new-tokens") && flags->has("max-tokens")) {
    std::fprintf(stderr,
                 "troupe generate: --max-tokens is an alias of --max-new-tokens; give one\n");
    return 2;
  }
  const char* max_flag = flags->has("max-tokens") ? "max-tokens" : "max-new-tokens";
  if (flags->has(max_flag) && (!absl::SimpleAtoi(flags->get(max_flag), &max_tokens) ||
                               max_tokens < 1 || max_tokens > kMaxNewTokens)) {
    std::fprintf(stderr, "troupe generate: --%s takes a number from 1 to %d\n", max_flag,
                 kMaxNewTokens);
    return 2;
  }
  if (flags->has("temperature")) {
    absl::StatusOr<float> t = parse_temperature(flags->get("temperature"));
    if (!t.ok()) {
      std::fprintf(stderr, "troupe generate: %s\n",
                   cluster::printable(t.status().message()).c_str());
      return 2;
    }
    temperature = *t;
  }
  if (flags->has("top-k")) {
    absl::StatusOr<int> k = parse_top_k(flags->get("top-k"));
    if (!k.ok()) {
      std::fprintf(stderr, "troupe generate: %s\n",
                   cluster::printable(k.status().message()).c_str());
      return 2;
    }
    top_k = *k;
  }
  if (flags->has("top-p")) {
    absl::StatusOr<float> p = parse_top_p(flags->get("top-p"));
    if (!p.ok()) {
      std::fprintf(stderr, "troupe generate: %s\n",
                   cluster::printable(p.status().message()).c_str());
      return 2;
    }
    top_p = *p;
  }
  if (flags->has("seed") && !absl::SimpleAtoi(flags->get("seed"), &seed)) {
    std::fprintf(stderr, "troupe generate: --seed takes a number\n");
    return 2;
  }
  absl::StatusOr<SavedModel> saved = flags->has("model")
                                         ? load_model(flags->get("model"))
                                         : load_checkpoint_model(flags->get("checkpoint"), *step);
  if (!saved.ok()) return fail(std::string(saved.status().message()));
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tokenizer = model_tokenizer(
      *saved, flags->get(flags->has("model") ? "model" : "checkpoint"), flags->get("tokenizer"));
  if (!tokenizer.ok()) return fail(std::string(tokenizer.status().message()));
  const text::Tokenizer& tok = **tokenizer;
  absl::StatusOr<std::unique_ptr<nn::Model>> model = nn::create_model(saved->model);
  if (!model.ok()) return fail(std::string(model.status().message()));
  std::copy(saved->params.begin(), saved->params.end(), (*model)->params());
  const std::string prompt = flags->get("prompt");
  std::vector<int32_t> tokens = tok.encode(prompt);
  if (tokens.empty()) return fail("the prompt encodes to no tokens");
  // Generation stops at the end of the text: a newline for byte-level models (a line, as the
  // examples are), the end-of-text token for the others.
  const int32_t stop = flags->has("no-stop") ? -1 : tok.end_of_text().value_or('\n');
  auto out = actors::generate_tokens(**model, {tokens},
                                     {.max_new_tokens = max_tokens,
                                      .temperature = temperature,
                                      .top_k = top_k,
                                      .top_p = top_p,
                                      .seed = seed,
                                      .stop_token = stop,
                                      .use_kv_cache = !flags->has("no-kv-cache")});
  if (!out.ok()) return fail(std::string(out.status().message()));
  std::vector<int32_t>& generated = (*out)[0];
  if (stop >= 0 && !generated.empty() && generated.back() == stop) generated.pop_back();
  std::printf("%s%s\n", prompt.c_str(), tok.decode(generated).c_str());
  return 0;
}

}  // namespace troupe::trainers
