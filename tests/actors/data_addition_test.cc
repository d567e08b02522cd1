// The synthetic addition task: the line format with its reversed sum on
// concrete problems, the training stream (exact, deterministic, every line
// right), and the held-out split, checked over every problem of 2 digits.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "actors/data/addition_task.h"
#include "text/byte_tokenizer.h"

namespace troupe::actors {
namespace {

TEST(AdditionTaskTest, LinesOnConcreteProblems) {
  AdditionProblem p = make_addition_problem(7, 35, 2);
  EXPECT_EQ(p.prompt, "07+35=");
  EXPECT_EQ(p.answer, "240");  // 042, least significant digit first
  EXPECT_EQ(addition_line(p), "07+35=240\n");
  EXPECT_EQ(addition_line(make_addition_problem(99, 99, 2)), "99+99=891\n");  // 198
  EXPECT_EQ(addition_line(make_addition_problem(5, 5, 1)), "5+5=01\n");       // 10
  EXPECT_EQ(addition_line(make_addition_problem(0, 0, 3)), "000+000=0000\n");
  EXPECT_EQ(addition_line(make_addition_problem(123, 9, 3)), "123+009=2310\n");  // 0132
  EXPECT_EQ(addition_line(make_addition_problem(999999999, 1, 9)),
            "999999999+000000001=0000000001\n");  // 1000000000
  EXPECT_EQ(addition_answer_length(2), 3);
}

TEST(AdditionTaskTest, PromptAndAnswerCheck) {
  AdditionProblem p = make_addition_problem(7, 35, 2);
  EXPECT_EQ(text::ByteTokenizer::decode(addition_prompt_tokens(p)), "07+35=");
  EXPECT_TRUE(check_answer(p, "240"));
  EXPECT_TRUE(check_answer(p, "240\n13+"));
  EXPECT_FALSE(check_answer(p, "241"));
  EXPECT_FALSE(check_answer(p, "042"));
  EXPECT_FALSE(check_answer(p, "24"));
  EXPECT_FALSE(check_answer(p, ""));
}

// The sum a line's reversed answer encodes, or -1 if it is not digits.
int64_t unreversed(std::string answer) {
  std::reverse(answer.begin(), answer.end());
  int64_t v = -1;
  return absl::SimpleAtoi(answer, &v) ? v : -1;
}

// The complete lines of a stream, parsed; fails the test on a malformed one.
std::vector<std::pair<int64_t, int64_t>> parse_lines(const std::string& text, int digits) {
  std::vector<std::pair<int64_t, int64_t>> problems;
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // cut short (or empty after the last "\n")
  for (const std::string& line : lines) {
    EXPECT_EQ(line.size(), static_cast<size_t>(3 * digits + 3)) << line;
    EXPECT_EQ(line[static_cast<size_t>(digits)], '+') << line;
    EXPECT_EQ(line[static_cast<size_t>(2 * digits + 1)], '=') << line;
    int64_t a = -1, b = -1;
    EXPECT_TRUE(absl::SimpleAtoi(line.substr(0, static_cast<size_t>(digits)), &a)) << line;
    EXPECT_TRUE(absl::SimpleAtoi(
        line.substr(static_cast<size_t>(digits) + 1, static_cast<size_t>(digits)), &b))
        << line;
    EXPECT_EQ(unreversed(line.substr(static_cast<size_t>(2 * digits + 2))), a + b) << line;
    problems.emplace_back(a, b);
  }
  return problems;
}

TEST(AdditionTaskTest, TrainingStreamIsExactRightAndDeterministic) {
  const AdditionTaskOptions options{.digits = 2, .num_samples = 300, .seed = 5, .seq_len = 32};
  auto tokens = addition_training_tokens(options);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 300u * 32 + 1);
  const std::string text = text::ByteTokenizer::decode(*tokens);
  EXPECT_EQ(parse_lines(text, 2).size(), tokens->size() / 10);  // 10 bytes a line, last cut

  // Lines are 10 bytes: with a seq_len that is a multiple of 10 every sample
  // starts at a line start, as addition_prompt_tokens gives a prompt.
  for (size_t k = 10; k < text.size(); k += 10)
    EXPECT_EQ(text[k - 1], '\n');

  EXPECT_EQ(*addition_training_tokens(options), *tokens);
  // Pinned, as the held-out split below.
  auto pinned = addition_training_tokens({.digits = 3, .num_samples = 1, .seed = 9, .seq_len = 12});
  EXPECT_EQ(text::ByteTokenizer::decode(*pinned), "180+456=6360\n");
  AdditionTaskOptions other = options;
  other.seed = 6;
  EXPECT_NE(*addition_training_tokens(other), *tokens);

  auto data = make_addition_dataset(options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples(32), 300);
  EXPECT_EQ(data->vocab_size(), 256);
  EXPECT_EQ(data->header().tokenizer, "bytes");
  EXPECT_NE(data->header().source.find("digits=2"), std::string::npos);
}

TEST(AdditionTaskTest, HeldOutProblemsNeverTrainedOnExhaustivelyForTwoDigits) {
  const AdditionTaskOptions options{.digits = 2, .num_samples = 4000, .seed = 11, .seq_len = 64};
  std::set<std::pair<int64_t, int64_t>> held_out;
  for (int64_t a = 0; a < 100; ++a) {
    for (int64_t b = 0; b < 100; ++b) {
      EXPECT_EQ(is_held_out(a, b, options.seed), is_held_out(b, a, options.seed));
      if (is_held_out(a, b, options.seed)) held_out.emplace(a, b);
    }
  }
  // About one in ten; exactly 970 for seed 11 (pinned by an independent
  // Python transcription of the hash: the split must not change between
  // versions, or a model's held-out accuracy means nothing).
  EXPECT_EQ(held_out.size(), 970u);

  auto tokens = addition_training_tokens(options);
  ASSERT_TRUE(tokens.ok());
  std::set<std::pair<int64_t, int64_t>> trained;
  for (const auto& p : parse_lines(text::ByteTokenizer::decode(*tokens), 2)) {
    EXPECT_FALSE(held_out.contains(p)) << p.first << "+" << p.second << " is held out";
    trained.insert(p);
  }
  // 25600 lines cover most of the other 9000 problems (~94% expected).
  EXPECT_GT(trained.size(), (10000 - held_out.size()) * 85 / 100);

  // The split depends on the seed.
  int differ = 0;
  for (int64_t a = 0; a < 100; ++a) {
    for (int64_t b = 0; b < 100; ++b)
      differ += is_held_out(a, b, 11) != is_held_out(a, b, 12);
  }
  EXPECT_GT(differ, 500);

  auto eval = held_out_problems(options, 200);
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_EQ(eval->size(), 200u);
  std::set<std::pair<int64_t, int64_t>> distinct;
  for (const AdditionProblem& p : *eval) {
    EXPECT_TRUE(held_out.contains({p.a, p.b}));
    EXPECT_EQ(p.answer.size(), 3u);
    EXPECT_EQ(unreversed(p.answer), p.a + p.b);
    EXPECT_EQ(p.prompt, make_addition_problem(p.a, p.b, 2).prompt);
    distinct.emplace(p.a, p.b);
  }
  EXPECT_EQ(distinct.size(), 200u);
}

TEST(AdditionTaskTest, HeldOutProblemsAreDeterministicPrefixes) {
  const AdditionTaskOptions options{.digits = 2, .num_samples = 10, .seed = 3, .seq_len = 16};
  auto many = held_out_problems(options, 100);
  auto few = held_out_problems(options, 30);
  ASSERT_TRUE(many.ok() && few.ok());
  ASSERT_EQ(few->size(), 30u);
  for (size_t i = 0; i < few->size(); ++i) {
    EXPECT_EQ((*few)[i].prompt, (*many)[i].prompt);
    EXPECT_EQ((*few)[i].answer, (*many)[i].answer);
  }
  // Not in enumeration order: shuffled by the seed.
  bool sorted = true;
  for (size_t i = 1; i < many->size(); ++i) {
    sorted = sorted && std::make_pair((*many)[i - 1].a, (*many)[i - 1].b) <
                           std::make_pair((*many)[i].a, (*many)[i].b);
  }
  EXPECT_FALSE(sorted);

  // One digit: only the held-out problems that exist.
  AdditionTaskOptions one = options;
  one.digits = 1;
  int exist = 0;
  for (int a = 0; a < 10; ++a) {
    for (int b = 0; b < 10; ++b)
      exist += is_held_out(a, b, one.seed);
  }
  auto all = held_out_problems(one, 1000);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(exist));
  EXPECT_TRUE(held_out_problems(one, 0)->empty());
  EXPECT_EQ(held_out_problems(one, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AdditionTaskTest, ManyDigitsDrawDistinctHeldOutProblems) {
  const AdditionTaskOptions options{.digits = 6, .num_samples = 10, .seed = 9, .seq_len = 16};
  auto eval = held_out_problems(options, 50);
  ASSERT_TRUE(eval.ok()) << eval.status();
  ASSERT_EQ(eval->size(), 50u);
  std::set<std::string> prompts;
  for (const AdditionProblem& p : *eval) {
    EXPECT_TRUE(is_held_out(p.a, p.b, options.seed));
    EXPECT_EQ(unreversed(p.answer), p.a + p.b);
    EXPECT_EQ(p.answer.size(), 7u);
    prompts.insert(p.prompt);
  }
  EXPECT_EQ(prompts.size(), 50u);
  auto again = held_out_problems(options, 50);
  EXPECT_EQ((*again)[49].prompt, (*eval)[49].prompt);

  auto tokens = addition_training_tokens(options);
  ASSERT_TRUE(tokens.ok());
  for (const auto& [a, b] : parse_lines(text::ByteTokenizer::decode(*tokens), 6)) {
    EXPECT_FALSE(is_held_out(a, b, options.seed));
  }
}

TEST(AdditionTaskTest, BadOptionsNameTheField) {
  auto message = [](AdditionTaskOptions o) { return std::string(validate(o).message()); };
  EXPECT_NE(message({.digits = 0}).find("digits is 0"), std::string::npos);
  EXPECT_NE(message({.digits = 10}).find("digits is 10"), std::string::npos);
  EXPECT_NE(message({.num_samples = 0}).find("num_samples is 0"), std::string::npos);
  EXPECT_NE(message({.seq_len = 0}).find("seq_len is 0"), std::string::npos);
  EXPECT_NE(message({.num_samples = int64_t{1} << 40}).find("tokens"), std::string::npos);
  EXPECT_TRUE(validate({}).ok());
  EXPECT_EQ(make_addition_dataset({.digits = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace troupe::actors
