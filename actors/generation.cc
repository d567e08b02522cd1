#include "actors/generation.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "actors/data/byte_tokenizer.h"

namespace troupe::actors {
namespace {

// splitmix64: a small portable generator, so that samples do not depend on
// the standard library's distributions.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int32_t pick(const float* logits, int V, float temperature, uint64_t& rng) {
  if (temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  float max = *std::max_element(logits, logits + V);
  std::vector<double> p(V);
  double sum = 0;
  for (int i = 0; i < V; ++i)
    sum += p[i] = std::exp((logits[i] - max) / temperature);
  double u = static_cast<double>(next_random(rng) >> 11) * 0x1.0p-53 * sum;
  for (int i = 0; i < V; ++i) {
    if ((u -= p[i]) < 0) return i;
  }
  return V - 1;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> generate_tokens(
    nn::Model& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerateOptions& options) {
  const nn::ModelConfig& config = model.config();
  if (prompts.empty() || prompts[0].empty()) {
    return absl::InvalidArgumentError("generate: no prompt, or an empty one");
  }
  const int B = static_cast<int>(prompts.size());
  const size_t length = prompts[0].size();
  std::vector<std::vector<int32_t>> context = prompts;
  for (const auto& row : prompts) {
    if (row.size() != length)
      return absl::InvalidArgumentError("generate: prompts differ in length");
    for (int32_t t : row) {
      if (t < 0 || t >= config.vocab_size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "generate: token ", t, " outside the vocabulary [0, ", config.vocab_size(), ")"));
      }
    }
  }
  std::vector<std::vector<int32_t>> out(B);
  std::vector<bool> stopped(B, false);
  uint64_t rng = options.seed;
  const int Vp = config.padded_vocab();
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const int T = static_cast<int>(std::min<size_t>(context[0].size(), config.max_seq_len()));
    std::vector<int32_t> inputs(static_cast<size_t>(B) * T);
    for (int b = 0; b < B; ++b) {
      std::copy(context[b].end() - T, context[b].end(),
                inputs.begin() + static_cast<size_t>(b) * T);
    }
    absl::StatusOr<float> ran = model.forward(inputs.data(), nullptr, B, T);
    if (!ran.ok()) return ran.status();
    bool all_stopped = true;
    for (int b = 0; b < B; ++b) {
      const float* logits = model.logits() + (static_cast<size_t>(b) * T + T - 1) * Vp;
      int32_t token = pick(logits, config.vocab_size(), options.temperature, rng);
      context[b].push_back(token);
      if (!stopped[b]) {
        out[b].push_back(token);
        if (token == options.stop_token) stopped[b] = true;
      }
      all_stopped = all_stopped && stopped[b];
    }
    if (all_stopped) break;
  }
  return out;
}

absl::StatusOr<EvalReport> evaluate_task(nn::Model& model, const EvalRequest& request) {
  absl::StatusOr<std::vector<AdditionProblem>> problems =
      held_out_problems(request.task, request.samples);
  if (!problems.ok()) return problems.status();
  EvalReport report;
  if (problems->empty()) return report;
  std::vector<std::vector<int32_t>> prompts;
  for (const AdditionProblem& p : *problems)
    prompts.push_back(addition_prompt_tokens(p));
  absl::StatusOr<std::vector<std::vector<int32_t>>> generated = generate_tokens(
      model, prompts, {.max_new_tokens = addition_answer_length(request.task.digits)});
  if (!generated.ok()) return generated.status();
  for (size_t i = 0; i < problems->size(); ++i) {
    const AdditionProblem& problem = (*problems)[i];
    std::string answer = ByteTokenizer::decode((*generated)[i]);
    bool right = check_answer(problem, answer);
    report.correct += right ? 1 : 0;
    if (report.examples.size() < 4) {
      report.examples.push_back(
          absl::StrCat(problem.prompt, absl::CEscape(answer),
                       right ? std::string("  (right)") : "  (expected " + problem.answer + ")"));
    }
  }
  report.total = static_cast<int>(problems->size());
  return report;
}

}  // namespace troupe::actors
