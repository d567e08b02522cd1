// Incremental decoding through the model seam (nn/model/model.h, docs/models.md): a Decoder,
// made by a whole model (Model::make_decoder), keeps every block's keys and values of the
// positions it has seen, a KV cache of [B, KV, capacity, hd] per block for B rows decoded side by
// side (KV key/value heads of hd channels), so that each new token costs one position, not the
// whole prefix:
//
//   auto decoder = model->make_decoder(/*batch=*/B, /*capacity=*/model->config().max_seq_len());
//   decoder->append(prompts, T);            // prefill: the prompts [B, T] at positions [0, T)
//   next = argmax(decoder->logits());       // [B, Vp]: each row's last position
//   decoder->append(next, 1);               // position T; and so on, one position a call
//   decoder->reset();                       // a new sequence from position 0
//
// What append(tokens, T) gives for position p is what Model::forward gives at p for the row's
// tokens [0, p] (each architecture's positions: GPT-2's learned ones, Llama's rotary angles of
// the absolute position), up to float rounding: the logits agree to about 1e-5 relative, not
// bitwise (the products run in another order for a few rows than for a whole batch).
//
// An architecture implements Decoder over its own kernels; a device model would hold its cache
// in device memory behind the same calls (logits() on the host).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace troupe::nn {

// Not thread-safe: one caller at a time, and not at the same time as a call on its model (they
// share the kernels' threads). Deterministic: the same calls on the same parameters give bitwise
// the same logits for a fixed thread count. REQUIRES: the model it was made by outlives it and
// stays where it is (not moved); the model's parameters are read at every append, so changing
// them between calls mixes two models in one cache (reset() after changing them).
class Decoder {
 public:
  virtual ~Decoder() = default;

  // The rows decoded side by side, and the most positions each row holds.
  virtual int batch() const = 0;
  virtual int capacity() const = 0;
  // The positions each row holds now (every row the same), 0 after reset().
  virtual int length() const = 0;

  // Appends T positions to every row: tokens [B, T] (row b's at tokens + b T) at positions
  // [length(), length() + T), each attending to its row's positions up to itself; then
  // logits() holds each row's logits at its last new position. The prompt in one call
  // (prefill), then one token a call. InvalidArgument when T < 1, length() + T > capacity() or
  // a token is outside the vocabulary; nothing is appended then. ResourceExhausted without the
  // memory for a longer prefill's scratch.
  [[nodiscard]] virtual absl::Status append(const int32_t* tokens, int T) = 0;

  // [B, Vp]: each row's logits at the last position append() added (columns [V, Vp) are the
  // vocabulary's padding, not part of the softmax). Valid until the next append or reset;
  // REQUIRES: length() > 0.
  virtual const float* logits() const = 0;

  // Forgets every position: the next append starts at position 0 (the cache's memory is kept).
  virtual void reset() = 0;

  // Bytes held: the cache and the scratch.
  virtual size_t memory_bytes() const = 0;
};

}  // namespace troupe::nn
