// Validation loss over a held-out token dataset: every non-overlapping window of T tokens (the
// samples of token_dataset.h), split over the data-parallel ranks so that each window is counted
// once, forward only.
//
//   ValidationRequest r{.path = "data/shakespeare_val", .seq_len = 64, .batch = 12,
//                       .rank = d, .world = dp};
//   auto part = validation_loss(model, data, r);      // on each rank
//   ValidationResult v = combine({part...}, data.header());  // on the driver
//   v.loss();  v.bits_per_byte();
//
// Rank r of `world` takes windows [r * n / world, (r + 1) * n / world) of the n = num_samples(T)
// windows: contiguous, disjoint, covering all of them.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "actors/data/token_dataset.h"
#include "core/codec.h"
#include "nn/model/model.h"

namespace troupe::actors {

struct ValidationRequest {
  std::string path;  // the validation dataset (TokenDataset::open)
  int seq_len = 0;   // T: the training sequence length
  int batch = 1;     // windows per forward
  int rank = 0;      // this rank's share of the windows
  int world = 1;
  int64_t max_windows = 0;  // 0: every window; else the first max_windows (nanoGPT's eval_iters)
  TROUPE_FIELDS(path, seq_len, batch, rank, world, max_windows);
};

// One rank's part: the summed cross-entropy (nats) over the positions of its windows.
struct ValidationPart {
  double loss_sum = 0;
  int64_t tokens = 0;  // positions scored (windows x T)
  int64_t windows = 0;
  TROUPE_FIELDS(loss_sum, tokens, windows);
};

// The whole split's: the mean loss per token and, where the dataset knows how many bytes of text
// it encodes, bits per byte (the loss in bits times tokens per byte: comparable across
// tokenizers).
struct ValidationResult {
  double loss_sum = 0;
  int64_t tokens = 0;
  int64_t windows = 0;
  double tokens_per_byte = 0;  // the dataset's num_tokens / text_bytes; 0: not known
  double loss() const { return tokens > 0 ? loss_sum / static_cast<double>(tokens) : 0; }
  // 0 when the dataset does not record its text bytes.
  double bits_per_byte() const;
};

// This rank's part of the validation loss of `model` (a whole one) on `data`. InvalidArgument for
// seq_len outside [1, max_seq_len], batch < 1, rank outside [0, world), or a dataset of no window
// of T + 1 tokens; the model's and the dataset's errors.
[[nodiscard]] absl::StatusOr<ValidationPart> validation_loss(nn::Model& model,
                                                             const TokenDataset& data,
                                                             const ValidationRequest& request);

// The parts of every rank, summed.
ValidationResult combine(std::span<const ValidationPart> parts, const TokenDatasetHeader& header);

}  // namespace troupe::actors
