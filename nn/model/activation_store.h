// What a model keeps of a batch between its pieces (nn/model/model.h), the same for every
// architecture: the part of the model it holds activations for (set_part), the batch shape they
// are laid out for (prepare), and its activation slots, one per micro-batch in flight, each with
// its own buffer, the inputs its embed_forward took and the targets its head_forward took.
// Backward's scratch is one buffer that every slot shares (a backward runs start to end on one
// slot). An architecture gives only the layout: its structs of pointers into the buffers and how
// they are carved for (B, T).
//
//   ActivationStore<Activations, ActivationGradients> store_{"GPT", num_layers};
//   store_.prepare(B, T, [&](float* base, Activations* a) { return carve(B, T, base, a); },
//                  [&](float* base, ActivationGradients* d) { return carve_grads(B, T, base, d);
//                  });
//   layernorm_forward(store_.acts().lnf, ...);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/memory.h"

namespace troupe::nn {

// Hands out consecutive ranges of a buffer; with a null base only counts.
class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t n) {
    float* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += n;
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

// Sets n floats from p to zero, split across the kernels' threads in whole cache lines (zero_grad
// runs in the step; the first touch of a new buffer also places its pages).
void zero_floats(float* p, size_t n);
// `buffer` replaced by n zeros of `category` on `device` (zero_floats on the CPU);
// ResourceExhausted without the memory.
absl::Status reset_zeroed(FloatBuffer& buffer, MemoryCategory category, size_t n,
                          Device device = Device::cpu());
// OK when `tokens` is non-null and each of its n tokens lies in [0, vocab_size); otherwise
// InvalidArgument "<model>: <what>[i] = x is outside the vocabulary [0, V)".
absl::Status check_tokens(const std::string& model, const int32_t* tokens, size_t n, int vocab_size,
                          const char* what);

// The state that does not depend on the architecture's layout; ActivationStore adds the layout.
// Errors name the model and the piece: "GPT::forward_blocks: call prepare() first".
class ActivationState {
 public:
  // `model` names the architecture in errors; it has `num_layers` blocks. One slot; the whole
  // model is the part. The buffers are on `device` (the model's).
  ActivationState(std::string model, int num_layers, Device device = Device::cpu());
  Device device() const { return device_; }

  // Keeps activations for blocks [begin, end), and the head's when `head`; forgets the batch.
  // InvalidArgument unless 0 <= begin < end <= num_layers and a part with the head ends at the
  // last block.
  [[nodiscard]] absl::Status set_part(int begin, int end, bool head);
  int part_begin() const { return part_begin_; }
  int part_end() const { return part_end_; }
  bool part_head() const { return part_head_; }

  // n slots, slot 0 current; forgets the batch. InvalidArgument unless n >= 1.
  [[nodiscard]] absl::Status set_slots(int n);
  int slots() const { return static_cast<int>(slots_.size()); }
  int slot() const { return slot_; }
  // REQUIRES: 0 <= j < slots().
  void use_slot(int j) { slot_ = j; }

  // The batch shape the buffers are laid out for; 0 until prepared (and after set_part, set_slots).
  int B() const { return B_; }
  int T() const { return T_; }
  size_t BT() const { return static_cast<size_t>(B_) * static_cast<size_t>(T_); }
  // FailedPrecondition "<model>::<what>: call prepare() first" when B() is 0.
  absl::Status check_prepared(const char* what) const;
  // check_prepared, then InvalidArgument unless 0 <= begin <= end <= num_layers, and
  // FailedPrecondition for a non-empty range outside the part.
  absl::Status check_blocks(int begin, int end, const char* what) const;

  // The current slot's inputs: set_inputs copies BT() tokens.
  void set_inputs(const int32_t* inputs);
  const int32_t* inputs() const { return current().inputs.data(); }
  bool have_inputs() const { return current().have_inputs; }
  // FailedPrecondition "<model>::<what>: no embed_forward for the current batch shape".
  absl::Status check_inputs(const char* what) const;
  // The current slot's targets: set_targets copies BT() tokens; clear_targets leaves none.
  void set_targets(const int32_t* targets);
  void clear_targets() { current().have_targets = false; }
  const int32_t* targets() const { return current().targets.data(); }
  bool have_targets() const { return current().have_targets; }

  // For embed_backward_rows: the row of each current input under `row_of` (row_of[token]).
  // check_inputs, then InvalidArgument when row_of has fewer than vocab_size entries or an
  // input's row is outside [0, num_rows), naming the token. Valid until the next call.
  absl::StatusOr<const int32_t*> input_rows(std::span<const int32_t> row_of, int num_rows,
                                            int vocab_size);

  // What the slots' buffers and backward's scratch hold, in bytes.
  size_t activation_bytes() const;
  size_t scratch_bytes() const { return scratch_.size() * sizeof(float); }

 protected:
  // Until the next prepare, no piece runs on what the activations held.
  void forget();
  // Every slot's buffer at least `per_slot` floats and the scratch at least `scratch` floats; a
  // buffer that grows is zeroed (reset_zeroed). Every slot's inputs and targets are gone.
  absl::Status reserve(size_t per_slot, size_t scratch);
  float* slot_buffer(int j) { return slots_[static_cast<size_t>(j)].buffer.data(); }
  float* scratch_buffer() { return scratch_.data(); }
  void set_shape(int B, int T) {
    B_ = B;
    T_ = T;
  }

 private:
  struct Slot {
    FloatBuffer buffer;
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;
    bool have_inputs = false;
    bool have_targets = false;
  };
  Slot& current() { return slots_[static_cast<size_t>(slot_)]; }
  const Slot& current() const { return slots_[static_cast<size_t>(slot_)]; }

  std::string model_;
  int num_layers_ = 0;
  Device device_;
  int part_begin_ = 0;
  int part_end_ = 0;
  bool part_head_ = true;
  int B_ = 0;
  int T_ = 0;
  std::vector<Slot> slots_;  // at least one
  int slot_ = 0;
  FloatBuffer scratch_;
  std::vector<int32_t> input_rows_;
};

// ActivationState with the architecture's layout: `Acts` and `Grads` are its structs of pointers
// into a slot's buffer and into the scratch.
template <typename Acts, typename Grads>
class ActivationStore : public ActivationState {
 public:
  using ActivationState::ActivationState;

  // Lays out every slot's activations and backward's scratch for (B, T) and makes (B, T)
  // current: carve_acts(base, Acts*) and carve_grads(base, Grads*) lay them out from base and
  // return their size in floats, with a null base only counting. A smaller batch reuses the
  // buffers, a larger one replaces them. Nothing to do when (B, T) is current. The caller has
  // checked (B, T).
  template <typename CarveActs, typename CarveGrads>
  [[nodiscard]] absl::Status prepare(int B, int T, CarveActs&& carve_acts,
                                     CarveGrads&& carve_grads) {
    if (B == this->B() && T == this->T()) return absl::OkStatus();
    forget();
    const size_t per_slot = carve_acts(nullptr, nullptr);
    if (absl::Status s = reserve(per_slot, carve_grads(nullptr, nullptr)); !s.ok()) return s;
    acts_.assign(static_cast<size_t>(slots()), Acts{});
    for (int j = 0; j < slots(); ++j)
      carve_acts(slot_buffer(j), &acts_[static_cast<size_t>(j)]);
    carve_grads(scratch_buffer(), &grads_);
    set_shape(B, T);
    return absl::OkStatus();
  }

  // The current slot's activations (all null before its first prepare).
  const Acts& acts() const {
    const auto j = static_cast<size_t>(slot());
    return j < acts_.size() ? acts_[j] : none_;
  }
  // Backward's scratch.
  const Grads& grads() const { return grads_; }

 private:
  std::vector<Acts> acts_;  // a slot's, once prepared
  Grads grads_ = {};
  Acts none_ = {};
};

}  // namespace troupe::nn
