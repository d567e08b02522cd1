#include "actors/data/addition_task.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "actors/data/random.h"
#include "text/byte_tokenizer.h"

namespace troupe::actors {
namespace {

// The splitmix64 streams of one task seed.
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kEvalStream = 2;
constexpr uint64_t kHoldOutStream = 3;

constexpr int64_t kMaxTokens = int64_t{1} << 30;
// Above this many (a, b) pairs held_out_problems samples instead of listing.
constexpr int64_t kEnumerateLimit = 1000000;
// A draw that finds only held-out problems this many times in a row means
// the split left nothing to train on (impossible but for tiny digits).
constexpr int kMaxRejections = 10000;

int64_t power_of_ten(int digits) {
  int64_t p = 1;
  for (int i = 0; i < digits; ++i)
    p *= 10;
  return p;
}

}  // namespace

absl::Status validate(const AdditionTaskOptions& options) {
  if (options.digits < 1 || options.digits > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("addition task: digits is ", options.digits, ", expected 1 to 9"));
  }
  if (options.num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("addition task: num_samples is ", options.num_samples, ", expected >= 1"));
  }
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("addition task: seq_len is ", options.seq_len, ", expected >= 1"));
  }
  if (options.num_samples > (kMaxTokens - 1) / options.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "addition task: num_samples ", options.num_samples, " x seq_len ", options.seq_len,
        " is over ", kMaxTokens, " tokens; write a dataset file for more (troupe data)"));
  }
  return absl::OkStatus();
}

AdditionProblem make_addition_problem(int64_t a, int64_t b, int digits) {
  AdditionProblem p;
  p.a = a;
  p.b = b;
  p.prompt = absl::StrFormat("%0*d+%0*d=", digits, a, digits, b);
  p.answer = absl::StrFormat("%0*d", digits + 1, a + b);
  std::reverse(p.answer.begin(), p.answer.end());
  return p;
}

std::string addition_line(const AdditionProblem& problem) {
  return absl::StrCat(problem.prompt, problem.answer, "\n");
}

bool is_held_out(int64_t a, int64_t b, uint64_t seed) {
  const uint64_t lo = static_cast<uint64_t>(std::min(a, b));
  const uint64_t hi = static_cast<uint64_t>(std::max(a, b));
  return mix64(mix64(derive_seed(seed, kHoldOutStream) ^ lo) ^ hi) % 10 == 0;
}

absl::StatusOr<std::vector<int32_t>> addition_training_tokens(const AdditionTaskOptions& options) {
  if (absl::Status s = validate(options); !s.ok()) return s;
  const size_t needed = static_cast<size_t>(options.num_samples * options.seq_len + 1);
  const uint64_t range = static_cast<uint64_t>(power_of_ten(options.digits));
  SplitMix64 rng(derive_seed(options.seed, kTrainStream));
  std::vector<int32_t> tokens;
  tokens.reserve(needed + static_cast<size_t>(3 * options.digits + 4));
  int rejections = 0;
  while (tokens.size() < needed) {
    const auto a = static_cast<int64_t>(rng.below(range));
    const auto b = static_cast<int64_t>(rng.below(range));
    if (is_held_out(a, b, options.seed)) {
      if (++rejections > kMaxRejections) {
        return absl::InternalError(
            absl::StrCat("addition task: seed ", options.seed, " holds out every problem drawn"));
      }
      continue;
    }
    rejections = 0;
    text::ByteTokenizer::encode_append(addition_line(make_addition_problem(a, b, options.digits)),
                                       &tokens);
  }
  tokens.resize(needed);
  return tokens;
}

std::string describe(const AdditionTaskOptions& options) {
  return absl::StrCat("synthetic addition: digits=", options.digits,
                      " num_samples=", options.num_samples, " seq_len=", options.seq_len,
                      " seed=", options.seed);
}

absl::StatusOr<TokenDataset> make_addition_dataset(const AdditionTaskOptions& options) {
  absl::StatusOr<std::vector<int32_t>> tokens = addition_training_tokens(options);
  if (!tokens.ok()) return tokens.status();
  return TokenDataset::from_tokens(*std::move(tokens), text::ByteTokenizer::kVocabSize,
                                   text::ByteTokenizer::kName, describe(options));
}

absl::StatusOr<std::vector<AdditionProblem>> held_out_problems(const AdditionTaskOptions& options,
                                                               int n) {
  if (absl::Status s = validate(options); !s.ok()) return s;
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("held_out_problems: n is ", n, ", expected >= 0"));
  }
  const int64_t range = power_of_ten(options.digits);
  SplitMix64 rng(derive_seed(options.seed, kEvalStream));
  std::vector<std::pair<int64_t, int64_t>> chosen;
  if (range * range <= kEnumerateLimit) {
    // Every held-out pair, in a seeded Fisher-Yates order.
    for (int64_t a = 0; a < range; ++a) {
      for (int64_t b = 0; b < range; ++b) {
        if (is_held_out(a, b, options.seed)) chosen.emplace_back(a, b);
      }
    }
    for (size_t i = chosen.size(); i > 1; --i) {
      std::swap(chosen[i - 1], chosen[rng.below(i)]);
    }
    if (chosen.size() > static_cast<size_t>(n)) chosen.resize(static_cast<size_t>(n));
  } else {
    // About one pair in ten is held out among >= 10^8: draw until n distinct.
    std::set<std::pair<int64_t, int64_t>> seen;
    const int64_t max_draws = int64_t{1000} * (n + 1);
    for (int64_t draw = 0; draw < max_draws && chosen.size() < static_cast<size_t>(n); ++draw) {
      const auto a = static_cast<int64_t>(rng.below(static_cast<uint64_t>(range)));
      const auto b = static_cast<int64_t>(rng.below(static_cast<uint64_t>(range)));
      if (is_held_out(a, b, options.seed) && seen.emplace(a, b).second) chosen.emplace_back(a, b);
    }
  }
  std::vector<AdditionProblem> problems;
  problems.reserve(chosen.size());
  for (const auto& [a, b] : chosen) {
    problems.push_back(make_addition_problem(a, b, options.digits));
  }
  return problems;
}

std::vector<int32_t> addition_prompt_tokens(const AdditionProblem& problem) {
  return text::ByteTokenizer::encode(problem.prompt);
}

bool check_answer(const AdditionProblem& problem, absl::string_view generated) {
  return absl::StartsWith(generated, problem.answer);
}

}  // namespace troupe::actors
