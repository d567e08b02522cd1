#include "nn/model/activation_store.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/threads.h"

namespace troupe::nn {

void zero_floats(float* p, size_t n) {
  if (n < (size_t{1} << 16) || num_threads() == 1) {
    if (n > 0) std::memset(p, 0, n * sizeof(float));
    return;
  }
#pragma omp parallel num_threads(num_threads())
  {
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const size_t lines = (n + 15) / 16;  // 64-byte lines: no line shared between threads
    const size_t begin = std::min(n, lines * tid / nth * 16);
    const size_t end = std::min(n, lines * (tid + 1) / nth * 16);
    std::memset(p + begin, 0, (end - begin) * sizeof(float));
  }
}

absl::Status reset_zeroed(FloatBuffer& buffer, MemoryCategory category, size_t n, Device device) {
  if (!device.is_cpu()) return buffer.reset(category, n, /*zero=*/true, device);
  if (absl::Status s = buffer.reset(category, n, /*zero=*/false); !s.ok()) return s;
  zero_floats(buffer.data(), n);
  return absl::OkStatus();
}

absl::Status check_tokens(const std::string& model, const int32_t* tokens, size_t n, int vocab_size,
                          const char* what) {
  if (tokens == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(model, ": ", what, " is null"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(model, ": ", what, "[", i, "] = ", tokens[i],
                                                     " is outside the vocabulary [0, ", vocab_size,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

ActivationState::ActivationState(std::string model, int num_layers, Device device)
    : model_(std::move(model)),
      num_layers_(num_layers),
      device_(device),
      part_end_(num_layers),
      slots_(1) {}

absl::Status ActivationState::set_part(int begin, int end, bool head) {
  const int L = num_layers_;
  if (begin < 0 || begin >= end || end > L || (head && end != L)) {
    return absl::InvalidArgumentError(absl::StrCat(
        model_, "::set_part: blocks [", begin, ", ", end, ")", head ? " with the head" : "", " of ",
        L, ": a part is a non-empty range within [0, ", L,
        ") and has the head only if it ends at the last block"));
  }
  part_begin_ = begin;
  part_end_ = end;
  part_head_ = head;
  forget();
  return absl::OkStatus();
}

absl::Status ActivationState::set_slots(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_, "::set_activation_slots: ", n, " slots (at least one)"));
  }
  slot_ = 0;
  slots_.resize(static_cast<size_t>(n));
  forget();
  return absl::OkStatus();
}

absl::Status ActivationState::check_prepared(const char* what) const {
  if (B_ == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(model_, "::", what, ": call prepare() first"));
  }
  return absl::OkStatus();
}

absl::Status ActivationState::check_blocks(int begin, int end, const char* what) const {
  if (absl::Status s = check_prepared(what); !s.ok()) return s;
  if (begin < 0 || begin > end || end > num_layers_) {
    return absl::InvalidArgumentError(absl::StrCat(model_, "::", what, ": blocks [", begin, ", ",
                                                   end, ") are not within [0, ", num_layers_, ")"));
  }
  if (begin < end && (begin < part_begin_ || end > part_end_)) {
    return absl::FailedPreconditionError(absl::StrCat(model_, "::", what, ": blocks [", begin, ", ",
                                                      end, ") are outside its part [", part_begin_,
                                                      ", ", part_end_, ")"));
  }
  return absl::OkStatus();
}

void ActivationState::set_inputs(const int32_t* inputs) {
  Slot& s = current();
  s.inputs.assign(inputs, inputs + BT());
  s.have_inputs = true;
}

absl::Status ActivationState::check_inputs(const char* what) const {
  if (!have_inputs()) {
    return absl::FailedPreconditionError(
        absl::StrCat(model_, "::", what, ": no embed_forward for the current batch shape"));
  }
  return absl::OkStatus();
}

void ActivationState::set_targets(const int32_t* targets) {
  Slot& s = current();
  s.targets.assign(targets, targets + BT());
  s.have_targets = true;
}

absl::StatusOr<const int32_t*> ActivationState::input_rows(std::span<const int32_t> row_of,
                                                           int num_rows, int vocab_size) {
  constexpr const char* kWhat = "embed_backward_rows";
  if (absl::Status s = check_inputs(kWhat); !s.ok()) return s;
  if (row_of.size() < static_cast<size_t>(vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat(model_, "::", kWhat, ": row_of has ",
                                                   row_of.size(), " entries for a vocabulary of ",
                                                   vocab_size));
  }
  const std::vector<int32_t>& inputs = current().inputs;
  input_rows_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    const int32_t row = row_of[static_cast<size_t>(inputs[i])];
    if (row < 0 || row >= num_rows) {
      return absl::InvalidArgumentError(absl::StrCat(model_, "::", kWhat, ": token ", inputs[i],
                                                     " has row ", row, ", not in [0, ", num_rows,
                                                     ")"));
    }
    input_rows_[i] = row;
  }
  return input_rows_.data();
}

size_t ActivationState::activation_bytes() const {
  size_t n = 0;
  for (const Slot& slot : slots_)
    n += slot.buffer.size() * sizeof(float);
  return n;
}

void ActivationState::forget() {
  B_ = T_ = 0;  // laid out again by the next prepare
  for (Slot& slot : slots_)
    slot.have_inputs = slot.have_targets = false;
}

absl::Status ActivationState::reserve(size_t per_slot, size_t scratch) {
  for (Slot& slot : slots_) {
    slot.have_inputs = slot.have_targets = false;
    if (slot.buffer.size() >= per_slot) continue;
    if (absl::Status s = reset_zeroed(slot.buffer, MemoryCategory::kActivations, per_slot, device_);
        !s.ok()) {
      return s;
    }
  }
  if (scratch_.size() < scratch) {
    return reset_zeroed(scratch_, MemoryCategory::kActivations, scratch, device_);
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
