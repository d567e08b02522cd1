#include "nn/model/kv_cache.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe::nn {

absl::StatusOr<KVCache> KVCache::create(int layers, int batch, int kv_heads, int head_dim,
                                        int capacity) {
  KVCache cache;
  cache.batch_ = batch;
  cache.capacity_ = capacity;
  cache.per_tensor_ = static_cast<size_t>(batch) * kv_heads * capacity * head_dim;
  if (absl::Status s = cache.buffer_.reset(MemoryCategory::kActivations,
                                           2 * static_cast<size_t>(layers) * cache.per_tensor_);
      !s.ok()) {
    return s;
  }
  return cache;
}

absl::Status KVCache::check_append(const std::string& model, int T) const {
  if (T < 1 || T > capacity_ - length_) {
    return absl::InvalidArgumentError(
        absl::StrCat(model, "::append: T = ", T, " new positions after ", length_,
                     " need 1 <= T <= capacity - length = ", capacity_ - length_));
  }
  return absl::OkStatus();
}

absl::StatusOr<float*> KVCache::scratch(size_t n) {
  if (scratch_.size() < n) {
    if (absl::Status s = scratch_.reset(MemoryCategory::kActivations, n, /*zero=*/false); !s.ok())
      return s;
  }
  return scratch_.data();
}

absl::Status check_decoder_request(const std::string& model, int tp_size, int part_begin,
                                   int part_end, bool head, int layers, bool bound, int batch,
                                   int capacity, int max_seq_len) {
  const std::string where = absl::StrCat(model, "::make_decoder: ");
  if (tp_size > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, "a tensor-parallel rank (of ", tp_size,
        ") holds a slice of the model; decoding needs the whole model (consolidate it first)"));
  }
  if (part_begin != 0 || part_end != layers || !head) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, "the model holds a pipeline part (blocks [", part_begin, ", ", part_end, ")",
        head ? " and the head" : " without the head", "); decoding needs the whole model"));
  }
  if (!bound) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, "not every parameter is bound (bind_parameters)"));
  }
  if (batch < 1 || capacity < 1 || capacity > max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(where, "batch = ", batch,
                                                   ", capacity = ", capacity,
                                                   " need batch >= 1 and 1 <= capacity "
                                                   "<= max_seq_len = ",
                                                   max_seq_len));
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
