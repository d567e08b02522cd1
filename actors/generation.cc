#include "actors/generation.h"

#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nn/memory.h"
#include "text/byte_tokenizer.h"

namespace troupe::actors {
namespace {

// The logits of each row's last position under the current context: the decoder's (prefill,
// then the tokens picked since, one position a call) while the context fits its capacity, else
// the full forward over each row's last max_seq_len tokens.
class LogitSource {
 public:
  LogitSource(nn::Model& model, std::unique_ptr<nn::Decoder> decoder)
      : model_(model), decoder_(std::move(decoder)) {}

  // The logits of row b at (*logits)[b * Vp], for the contexts (all of one length).
  absl::Status run(const std::vector<std::vector<int32_t>>& context, const float** logits) {
    const int B = static_cast<int>(context.size());
    const size_t length = context[0].size();
    if (decoder_ != nullptr && length <= static_cast<size_t>(decoder_->capacity())) {
      // The positions the cache lacks: the whole prompt first, then the last token.
      const int T = static_cast<int>(length) - decoder_->length();
      std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
      for (int b = 0; b < B; ++b) {
        std::copy(context[b].end() - T, context[b].end(),
                  tokens.begin() + static_cast<size_t>(b) * T);
      }
      if (absl::Status s = decoder_->append(tokens.data(), T); !s.ok()) return s;
      *logits = decoder_->logits();
      return absl::OkStatus();
    }
    decoder_.reset();  // outgrown: the window slides from here on
    const int T = static_cast<int>(std::min<size_t>(length, model_.config().max_seq_len()));
    std::vector<int32_t> inputs(static_cast<size_t>(B) * T);
    for (int b = 0; b < B; ++b) {
      std::copy(context[b].end() - T, context[b].end(),
                inputs.begin() + static_cast<size_t>(b) * T);
    }
    absl::StatusOr<float> ran = model_.forward(inputs.data(), nullptr, B, T);
    if (!ran.ok()) return ran.status();
    // Each row's last position: copied out (to the host from the model's device), as the
    // forward's logits are [B, T, Vp].
    const int Vp = model_.config().padded_vocab();
    last_.resize(static_cast<size_t>(B) * Vp);
    for (int b = 0; b < B; ++b) {
      const float* row = model_.logits() + (static_cast<size_t>(b) * T + T - 1) * Vp;
      if (absl::Status s =
              nn::copy_bytes(last_.data() + static_cast<size_t>(b) * Vp, nn::Device::cpu(), row,
                             model_.device(), static_cast<int64_t>(Vp * sizeof(float)));
          !s.ok()) {
        return s;
      }
    }
    *logits = last_.data();
    return absl::OkStatus();
  }

 private:
  nn::Model& model_;
  std::unique_ptr<nn::Decoder> decoder_;  // null: the full forward
  std::vector<float> last_;
};

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> generate_tokens(
    nn::Model& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerateOptions& options) {
  const nn::ModelConfig& config = model.config();
  if (prompts.empty() || prompts[0].empty()) {
    return absl::InvalidArgumentError("generate: no prompt, or an empty one");
  }
  const SamplingOptions sampling{
      .temperature = options.temperature, .top_k = options.top_k, .top_p = options.top_p};
  if (absl::Status s = validate(sampling); !s.ok()) return s;
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
  std::unique_ptr<nn::Decoder> decoder;
  if (options.use_kv_cache && options.max_new_tokens > 0) {
    absl::StatusOr<std::unique_ptr<nn::Decoder>> made = model.make_decoder(B, config.max_seq_len());
    // A model without a decoder (Unimplemented) generates with the full forward.
    if (made.ok()) {
      decoder = *std::move(made);
    } else if (made.status().code() != absl::StatusCode::kUnimplemented) {
      return made.status();
    }
  }
  LogitSource source(model, std::move(decoder));
  std::vector<std::vector<int32_t>> out(B);
  std::vector<bool> stopped(B, false);
  uint64_t rng = options.seed;
  const int Vp = config.padded_vocab();
  for (int n = 0; n < options.max_new_tokens; ++n) {
    const float* logits = nullptr;
    if (absl::Status s = source.run(context, &logits); !s.ok()) return s;
    bool all_stopped = true;
    for (int b = 0; b < B; ++b) {
      const int32_t token =
          sample_token(logits + static_cast<size_t>(b) * Vp, config.vocab_size(), sampling, rng);
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
    std::string answer = text::ByteTokenizer::decode((*generated)[i]);
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
