// A synthetic task to train on and measure: multi-digit addition, as bytes.
// Each problem is one line,
//
//   "07+35=240\n"     (digits = 2: 7 + 35 = 42)
//
// the operands zero-padded to `digits` digits and the sum written with
// digits + 1 digits, LEAST significant digit first ("042" reversed). Written
// that way a model that reads left to right produces each digit of the sum
// after the digits, and the carry, it depends on, which makes carries
// learnable (as in nanoGPT-style addition experiments).
//
// The training stream is such lines, drawn uniformly (operands in
// [0, 10^digits)) from a splitmix64 stream of `seed` and concatenated, cut to
// num_samples x seq_len + 1 tokens (the last line is cut short). A problem is
// held out of training when a hash of (min(a, b), max(a, b), seed) is 0
// modulo 10 (about 1 in 10; a + b and b + a together), so the model is
// evaluated on sums it has never seen:
//
//   auto data = make_addition_dataset(options);            // for a DataLoader
//   auto eval = held_out_problems(options, 200);
//   std::vector<int32_t> prompt = addition_prompt_tokens((*eval)[0]);  // "07+35="
//   ... greedily decode addition_answer_length(digits) tokens after it ...
//   bool right = check_answer((*eval)[0], text::ByteTokenizer::decode(generated));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "actors/data/token_dataset.h"
#include "core/codec.h"

namespace troupe::actors {

struct AdditionTaskOptions {
  int digits = 2;                // operand digits, 1 to 9
  int64_t num_samples = 100000;  // samples of seq_len in the training stream
  uint64_t seed = 1;             // the problems and the held-out split
  int seq_len = 64;              // T
  TROUPE_FIELDS(digits, num_samples, seed, seq_len);
};

// OK, or InvalidArgument naming the field: digits outside [1, 9],
// num_samples or seq_len < 1, or num_samples x seq_len + 1 over 2^30 tokens.
[[nodiscard]] absl::Status validate(const AdditionTaskOptions& options);

struct AdditionProblem {
  int64_t a = 0;
  int64_t b = 0;
  std::string prompt;  // "07+35="
  std::string answer;  // "240": a + b, digits + 1 digits, least significant first
  TROUPE_FIELDS(a, b, prompt, answer);
};

// The problem a + b. REQUIRES: 1 <= digits <= 9, 0 <= a, b < 10^digits.
AdditionProblem make_addition_problem(int64_t a, int64_t b, int digits);
// Its line in the training stream: prompt + answer + "\n".
std::string addition_line(const AdditionProblem& problem);
// The length of every answer: digits + 1.
inline int addition_answer_length(int digits) {
  return digits + 1;
}

// True if a + b (and b + a) is held out of the training stream of `seed`.
bool is_held_out(int64_t a, int64_t b, uint64_t seed);

// The training stream: num_samples x seq_len + 1 byte tokens, no held-out
// problem in it. Deterministic in `options`. InvalidArgument as validate().
[[nodiscard]] absl::StatusOr<std::vector<int32_t>> addition_training_tokens(
    const AdditionTaskOptions& options);
// The stream as a TokenDataset (vocab 256, tokenizer "bytes"): exactly
// options.num_samples samples of options.seq_len.
[[nodiscard]] absl::StatusOr<TokenDataset> make_addition_dataset(
    const AdditionTaskOptions& options);
// What make_addition_dataset puts in the dataset's "source".
std::string describe(const AdditionTaskOptions& options);

// n distinct held-out problems, in an order fixed by the seed (the same n
// problems, and the first n of any larger n, on every run). Fewer than n only
// when fewer exist (digits = 1 has about 10). InvalidArgument for n < 0 or
// options validate() rejects.
[[nodiscard]] absl::StatusOr<std::vector<AdditionProblem>> held_out_problems(
    const AdditionTaskOptions& options, int n);

// What the model is given to answer `problem`: its prompt as byte tokens, at
// the start of the sequence. Training windows that start at a line start
// show the model exactly that; a seq_len that is a multiple of the line
// length (3 x digits + 4) makes every window start at one.
std::vector<int32_t> addition_prompt_tokens(const AdditionProblem& problem);

// True if `generated` (the text decoded after the prompt) starts with the
// answer; what follows it (a "\n", more lines) is not judged.
bool check_answer(const AdditionProblem& problem, absl::string_view generated);

}  // namespace troupe::actors
