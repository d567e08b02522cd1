// What every architecture's Decoder (nn/model/decoder.h) holds the same way: the KV cache, per
// block a key and a value tensor [B, KV, capacity, hd], and the positions it holds; the scratch
// of one append, grown to the largest; and the checks of Model::make_decoder's request.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/memory.h"
#include "nn/model/decoder.h"

namespace troupe::nn {

class KVCache {
 public:
  // `layers` blocks of keys and values for `batch` rows, `kv_heads` heads of `head_dim` channels
  // and `capacity` positions, zeroed. ResourceExhausted without the memory.
  [[nodiscard]] static absl::StatusOr<KVCache> create(int layers, int batch, int kv_heads,
                                                      int head_dim, int capacity);

  int batch() const { return batch_; }
  int capacity() const { return capacity_; }
  int length() const { return length_; }
  // Block l's keys (values): [B, KV, capacity, hd].
  float* keys(int l) { return buffer_.data() + static_cast<size_t>(2 * l) * per_tensor_; }
  float* values(int l) { return buffer_.data() + static_cast<size_t>(2 * l + 1) * per_tensor_; }

  // InvalidArgument "<model>::append: ..." unless 1 <= T and length() + T <= capacity().
  absl::Status check_append(const std::string& model, int T) const;
  // The T positions of an append are in.
  void advance(int T) { length_ += T; }
  void reset() { length_ = 0; }

  // An append's scratch: at least n floats (kept for the next), or ResourceExhausted.
  absl::StatusOr<float*> scratch(size_t n);

  size_t bytes() const { return buffer_.bytes() + scratch_.bytes(); }

 private:
  int batch_ = 0;
  int capacity_ = 0;
  int length_ = 0;
  size_t per_tensor_ = 0;
  FloatBuffer buffer_;
  FloatBuffer scratch_;
};

// Model::make_decoder's checks, the same for every architecture: FailedPrecondition when
// `tp_size` > 1, the part is not the whole model ([part_begin, part_end) of `layers` blocks, with
// the head) or `bound` is false (some parameter not bound); InvalidArgument unless batch >= 1 and
// 1 <= capacity <= max_seq_len. Messages start with "<model>::make_decoder: ".
absl::Status check_decoder_request(const std::string& model, int tp_size, int part_begin,
                                   int part_end, bool head, int layers, bool bound, int batch,
                                   int capacity, int max_seq_len);

// What every architecture's decoder has in common: the cache and the logits of the last append.
// An architecture derives from it and writes append(), setting logits_ and advancing cache_.
class CachedDecoder : public Decoder {
 public:
  explicit CachedDecoder(KVCache cache) : cache_(std::move(cache)) {}

  int batch() const override { return cache_.batch(); }
  int capacity() const override { return cache_.capacity(); }
  int length() const override { return cache_.length(); }
  const float* logits() const override { return logits_; }
  void reset() override { cache_.reset(); }
  size_t memory_bytes() const override { return cache_.bytes(); }

 protected:
  KVCache cache_;
  float* logits_ = nullptr;
};

}  // namespace troupe::nn
