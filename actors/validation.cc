#include "actors/validation.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::actors {

double ValidationResult::bits_per_byte() const {
  return tokens_per_byte > 0 ? loss() / std::numbers::ln2 * tokens_per_byte : 0;
}

absl::StatusOr<ValidationPart> validation_loss(nn::Model& model, const TokenDataset& data,
                                               const ValidationRequest& request) {
  const int T = request.seq_len;
  if (T < 1 || T > model.config().max_seq_len()) {
    return absl::InvalidArgumentError(absl::StrCat("validation: seq_len ", T, " is not in [1, ",
                                                   model.config().max_seq_len(), "]"));
  }
  if (request.batch < 1)
    return absl::InvalidArgumentError(absl::StrCat("validation: batch ", request.batch));
  if (request.world < 1 || request.rank < 0 || request.rank >= request.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation: rank ", request.rank, " of ", request.world));
  }
  if (data.vocab_size() > model.config().vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation dataset ", data.name(), " has a vocabulary of ", data.vocab_size(),
                     " ids, more than the model's ", model.config().vocab_size()));
  }
  int64_t n = data.num_samples(T);
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("validation dataset ", data.name(), " holds ",
                                                   data.num_tokens(), " tokens: no window of ",
                                                   T + 1));
  }
  if (request.max_windows > 0) n = std::min(n, request.max_windows);
  const int64_t begin = n * request.rank / request.world;
  const int64_t end = n * (request.rank + 1) / request.world;
  ValidationPart part;
  std::vector<int32_t> inputs, targets;
  for (int64_t i = begin; i < end;) {
    const int B = static_cast<int>(std::min<int64_t>(request.batch, end - i));
    inputs.resize(static_cast<size_t>(B) * T);
    targets.resize(inputs.size());
    for (int b = 0; b < B; ++b) {
      absl::Status s = data.read_sample(i + b, T, inputs.data() + static_cast<size_t>(b) * T,
                                        targets.data() + static_cast<size_t>(b) * T);
      if (!s.ok()) return s;
    }
    absl::StatusOr<float> loss = model.forward(inputs.data(), targets.data(), B, T);
    if (!loss.ok()) return loss.status();
    part.loss_sum += static_cast<double>(*loss) * B * T;
    part.tokens += static_cast<int64_t>(B) * T;
    part.windows += B;
    i += B;
  }
  return part;
}

ValidationResult combine(std::span<const ValidationPart> parts, const TokenDatasetHeader& header) {
  ValidationResult result;
  for (const ValidationPart& p : parts) {
    result.loss_sum += p.loss_sum;
    result.tokens += p.tokens;
    result.windows += p.windows;
  }
  if (header.text_bytes > 0) {
    result.tokens_per_byte =
        static_cast<double>(header.num_tokens) / static_cast<double>(header.text_bytes);
  }
  return result;
}

}  // namespace troupe::actors
