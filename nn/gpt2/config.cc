#include "nn/gpt2/config.h"

#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace troupe::nn {

absl::Status GPTConfig::validate() const {
  auto positive = [](const char* field, int value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: ", field, " = ", value, " must be positive"));
  };
  for (absl::Status s : {positive("max_seq_len", max_seq_len), positive("vocab_size", vocab_size),
                         positive("num_layers", num_layers), positive("num_heads", num_heads),
                         positive("channels", channels)}) {
    if (!s.ok()) return s;
  }
  if (padded_vocab_size != 0 && padded_vocab_size < vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: padded_vocab_size = ", padded_vocab_size,
                     " < vocab_size = ", vocab_size, " (use 0 for no padding)"));
  }
  if (channels % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTConfig: channels = ", channels, " is not a multiple of num_heads = ", num_heads));
  }
  // The kernels index with int: the largest tensor, 4C x C or Vp x C, must fit.
  int64_t C = channels;
  if (4 * C * C > INT_MAX || int64_t{padded_vocab()} * C > INT_MAX ||
      int64_t{max_seq_len} * C > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: channels = ", channels, " with vocabulary ", padded_vocab(),
                     " and max_seq_len ", max_seq_len, " make a tensor over INT_MAX elements"));
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
