#include "nn/gpt2/gpt.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers/attention.h"
#include "nn/layers/crossentropy.h"
#include "nn/layers/detail/embedding.h"
#include "nn/layers/encoder.h"
#include "nn/layers/gelu.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/linear.h"
#include "nn/layers/residual.h"
#include "nn/model/init_rng.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// "h0.qkvw" -> "qkvw"; a name without '.' unchanged.
std::string_view base_name(const ParamTensor& t) {
  std::string_view name = t.name;
  return name.substr(name.find('.') + 1);
}

bool is_random(const ParamTensor& t) {
  const std::string_view name = base_name(t);
  return name == "wte" || name == "wpe" || name == "qkvw" || name == "fcw" || name == "attprojw" ||
         name == "fcprojw";
}

// GPT-2's initial values of whole-model tensor t into p (t.size floats), the random ones drawn
// from rng.
void fill_initial(const GPTConfig& config, InitRng& rng, const ParamTensor& t, float* p) {
  const std::string_view name = base_name(t);
  const size_t C = config.channels;
  if (name == "wte") {
    rng.fill_normal(p, config.vocab_size * C, 0.02);
    std::fill(p + config.vocab_size * C, p + t.size, 0.0f);
  } else if (name == "wpe" || name == "qkvw" || name == "fcw") {
    rng.fill_normal(p, t.size, 0.02);
  } else if (name == "attprojw" || name == "fcprojw") {
    rng.fill_normal(p, t.size, 0.02 / std::sqrt(2.0 * config.num_layers));
  } else if (name == "ln1w" || name == "ln2w" || name == "lnfw") {
    std::fill(p, p + t.size, 1.0f);
  } else {  // biases
    std::fill(p, p + t.size, 0.0f);
  }
}

absl::Status check_tokens(const int32_t* tokens, size_t n, int V, const char* what) {
  if (tokens == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: ", what, " is null"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("GPT: ", what, "[", i, "] = ", tokens[i],
                                                     " is outside the vocabulary [0, ", V, ")"));
    }
  }
  return absl::OkStatus();
}

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

// Split across the kernels' threads (zero_grad runs in the step; the first touch of a new buffer
// also places its pages).
void zero(float* p, size_t n) {
  if (n < (size_t{1} << 16) || num_threads() == 1) {
    std::memset(p, 0, n * sizeof(float));
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

// n zeros in `buffer`, spread over the kernels' threads (see zero()).
absl::Status reset_zeroed(FloatBuffer& buffer, MemoryCategory category, size_t n) {
  if (absl::Status s = buffer.reset(category, n, /*zero=*/false); !s.ok()) return s;
  if (n > 0) zero(buffer.data(), n);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GPT> GPT::create(const GPTConfig& config, const ModelOptions& options,
                                const ModelStorage& storage, const TensorSlice& slice) {
  if (absl::Status s = config.validate(); !s.ok()) return s;
  if (absl::Status s = validate_slice(config, slice); !s.ok()) return s;
  GPT gpt(config, options, storage, slice);
  const size_t n = gpt.layout_.num_params();
  // Unbound tensors are null until the caller binds them.
  gpt.param_tensors_.blocks.assign(static_cast<size_t>(config.num_layers), GPTBlockTensors{});
  gpt.grad_tensors_.blocks.assign(static_cast<size_t>(config.num_layers), GPTBlockTensors{});
  if (storage.parameters) {
    if (absl::Status s = reset_zeroed(gpt.params_, MemoryCategory::kParameters, n); !s.ok())
      return s;
    gpt.param_tensors_ = point_gpt_tensors(gpt.layout_, gpt.params_.data());
  }
  if (storage.gradients) {
    if (absl::Status s = reset_zeroed(gpt.grads_, MemoryCategory::kGradients, n); !s.ok()) return s;
    gpt.grad_tensors_ = point_gpt_tensors(gpt.layout_, gpt.grads_.data());
  }
  return gpt;
}

GPT::GPT(const GPTConfig& config, const ModelOptions& options, const ModelStorage& storage,
         const TensorSlice& slice)
    : config_(config),
      model_config_(config),
      options_(options),
      storage_(storage),
      layout_(config, slice),
      local_channels_(config.channels / slice.size),
      local_heads_(config.num_heads / slice.size),
      local_vocab_(config.padded_vocab() / slice.size),
      vocab_begin_(slice.rank * (config.padded_vocab() / slice.size)),
      part_end_(config.num_layers),
      slots_(1) {}

void GPT::set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) {
  tp_sum_ = std::move(allreduce_sum);
  tp_max_ = std::move(allreduce_max);
}

absl::Status GPT::sum_over_slices(float* data, size_t count) const {
  if (!sliced()) return absl::OkStatus();
  return tp_sum_(data, count);
}

absl::Status GPT::bind_parameters(size_t begin, size_t end, float* base) {
  if (storage_.parameters) {
    return absl::FailedPreconditionError("GPT::bind_parameters: the model owns its parameters");
  }
  return rebind_gpt_tensors(layout_, begin, end, base, &param_tensors_);
}

absl::Status GPT::bind_gradients(size_t begin, size_t end, float* base) {
  if (storage_.gradients) {
    return absl::FailedPreconditionError("GPT::bind_gradients: the model owns its gradients");
  }
  return rebind_gpt_tensors(layout_, begin, end, base, &grad_tensors_);
}

void GPT::init_parameters(uint64_t seed) {
  init_parameters(config_, layout_.slice(), seed, 0, num_params(), params_.data());
}

void GPT::init_parameters(const GPTConfig& config, const TensorSlice& slice, uint64_t seed,
                          size_t begin, size_t end, float* out) {
  if (slice.size == 1) {
    init_parameters(config, seed, begin, end, out);
    return;
  }
  // The whole model's values a tensor at a time (the generator runs through them all in buffer
  // order), each tensor's runs of the slice that fall in [begin, end) copied out: the memory of
  // one tensor, not of the whole model.
  const GPTParamLayout whole(config), sliced(config, slice);
  struct Run {
    size_t whole, slice, n;
  };
  std::vector<Run> runs;  // in the slice's order, which is the tensors' order
  for_each_slice_run(whole.model(), sliced.model(), [&](size_t w, size_t s, size_t n) {
    runs.push_back({w, s, n});
  });
  InitRng rng(seed);
  std::vector<float> values;
  size_t next = 0;
  for (const ParamTensor& t : whole.tensors()) {
    values.resize(t.size);
    fill_initial(config, rng, t, values.data());
    for (; next < runs.size() && runs[next].whole < t.offset + t.size; ++next) {
      const Run& r = runs[next];
      const size_t from = std::max(begin, r.slice), to = std::min(end, r.slice + r.n);
      if (from >= to) continue;
      const float* src = values.data() + (r.whole - t.offset) + (from - r.slice);
      std::copy(src, src + (to - from), out + (from - begin));
    }
  }
}

void GPT::init_parameters(const GPTConfig& config, uint64_t seed, size_t begin, size_t end,
                          float* out) {
  const GPTParamLayout layout(config);
  InitRng rng(seed);
  std::vector<float> scratch;  // a tensor that [begin, end) holds only part of
  for (const ParamTensor& t : layout.tensors()) {
    const size_t t_end = t.offset + t.size;
    const size_t from = std::max(begin, t.offset), to = std::min(end, t_end);
    // Every random tensor draws from the one generator in buffer order, wanted or not.
    if (from >= to && !is_random(t)) continue;
    float* p = nullptr;
    if (from == t.offset && to == t_end) {
      p = out + (t.offset - begin);
    } else {
      scratch.resize(t.size);
      p = scratch.data();
    }
    fill_initial(config, rng, t, p);
    if (p == scratch.data() && from < to) {
      std::copy(p + (from - t.offset), p + (to - t.offset), out + (from - begin));
    }
  }
}

void GPT::zero_grad() {
  zero(grads_.data(), grads_.size());
}

size_t GPT::carve_activations(int B, int T, float* base, Activations* acts) const {
  // The attention's and the MLP's tensors are a tensor-parallel rank's slice (Cl, NHl), the
  // residual stream and the LayerNorms whole on every rank.
  const size_t C = config_.channels, NH = local_heads_;
  const size_t L = static_cast<size_t>(part_end_ - part_begin_);  // the part's blocks
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
  const size_t BTCl = BT * static_cast<size_t>(local_channels_);
  const size_t Vp = part_head_ ? static_cast<size_t>(local_vocab_) : 0;
  const size_t HBT = part_head_ ? BT : 0;                    // the head's per-position values
  const size_t Lr = options_.recompute_activations ? 1 : L;  // blocks of recomputed tensors
  Carver c(base);
  Activations a;
  a.encoded = c.take(BTC);
  a.ln1 = c.take(Lr * BTC);
  a.ln1_mean = c.take(L * BT);
  a.ln1_rstd = c.take(L * BT);
  a.qkv = c.take(L * 3 * BTCl);
  a.atty = c.take(Lr * BTCl);
  a.att = c.take(Lr * BT * NH);  // attention's log-sum-exp per row and head
  a.residual2 = c.take(L * BTC);
  a.ln2 = c.take(Lr * BTC);
  a.ln2_mean = c.take(L * BT);
  a.ln2_rstd = c.take(L * BT);
  a.fch = c.take(L * 4 * BTCl);
  a.fch_gelu = c.take(Lr * 4 * BTCl);
  a.residual3 = c.take(L * BTC);
  a.lnf = c.take(HBT * C);
  a.lnf_mean = c.take(HBT);
  a.lnf_rstd = c.take(HBT);
  a.logits = c.take(HBT * Vp);
  a.lse = c.take(HBT);
  a.losses = c.take(HBT);
  if (acts != nullptr) *acts = a;
  return c.used();
}

size_t GPT::carve_activation_gradients(int B, int T, float* base,
                                       ActivationGradients* dacts) const {
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * config_.channels;
  const size_t BTCl = BT * static_cast<size_t>(local_channels_);
  Carver c(base);
  ActivationGradients d;
  d.dresidual = c.take(BTC);
  d.dln = c.take(BTC);
  d.datty = c.take(BTCl);
  d.dqkv = c.take(3 * BTCl);
  d.dfch = c.take(4 * BTCl);
  d.dfch_gelu = c.take(4 * BTCl);
  d.dlogits = c.take(part_head_ ? BT * static_cast<size_t>(local_vocab_) : 0);
  if (dacts != nullptr) *dacts = d;
  return c.used();
}

absl::Status GPT::prepare(int B, int T) {
  if (B < 1 || T < 1 || T > config_.max_seq_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT: batch B = ", B, ", T = ", T,
                     " needs B >= 1 and 1 <= T <= max_seq_len = ", config_.max_seq_len));
  }
  // The kernels index one block's tensors with int.
  const int64_t BT = int64_t{B} * T;
  const int64_t widest = std::max<int64_t>(4 * config_.channels, config_.padded_vocab());
  if (BT * widest > INT_MAX || BT * config_.num_heads * T > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: batch B = ", B, ", T = ", T,
                                                   " makes an activation over INT_MAX elements"));
  }
  if (sliced() && (!tp_sum_ || !tp_max_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPT: tensor-parallel rank ", layout_.slice().rank, " of ",
                     layout_.slice().size, " has no group to reduce over (set_tensor_parallel)"));
  }
  if (B == B_ && T == T_) return absl::OkStatus();
  // A smaller batch reuses the buffers; a larger one replaces them.
  B_ = T_ = 0;
  size_t n = carve_activations(B, T, nullptr, nullptr);
  for (Slot& slot : slots_) {
    if (slot.buffer.size() < n) {
      if (absl::Status s = reset_zeroed(slot.buffer, MemoryCategory::kActivations, n); !s.ok())
        return s;
    }
    carve_activations(B, T, slot.buffer.data(), &slot.acts);
    slot.have_inputs = slot.have_targets = false;
  }
  acts_ = slots_[static_cast<size_t>(slot_)].acts;
  n = carve_activation_gradients(B, T, nullptr, nullptr);
  if (dacts_buffer_.size() < n) {
    if (absl::Status s = reset_zeroed(dacts_buffer_, MemoryCategory::kActivations, n); !s.ok())
      return s;
  }
  carve_activation_gradients(B, T, dacts_buffer_.data(), &dacts_);
  B_ = B;
  T_ = T;
  have_inputs_ = false;
  have_targets_ = false;
  return absl::OkStatus();
}

absl::Status GPT::set_part(int block_begin, int block_end, bool head) {
  const int L = config_.num_layers;
  if (block_begin < 0 || block_begin >= block_end || block_end > L || (head && block_end != L)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT::set_part: blocks [", block_begin, ", ", block_end, ")", head ? " with the head" : "",
        " of ", L, ": a part is a non-empty range within [0, ", L,
        ") and has the head only if it "
        "ends at the last block"));
  }
  part_begin_ = block_begin;
  part_end_ = block_end;
  part_head_ = head;
  forget_activations();
  return absl::OkStatus();
}

absl::Status GPT::set_activation_slots(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPT::set_activation_slots: ", n, " slots (at least one)"));
  }
  use_slot(0);
  slots_.resize(static_cast<size_t>(n));
  forget_activations();
  return absl::OkStatus();
}

void GPT::forget_activations() {
  B_ = T_ = 0;  // carved again by the next prepare
  have_inputs_ = have_targets_ = false;
  for (Slot& slot : slots_)
    slot.have_inputs = slot.have_targets = false;
}

void GPT::use_slot(int j) {
  if (j == slot_) return;
  Slot& from = slots_[static_cast<size_t>(slot_)];
  std::swap(from.inputs, inputs_);
  std::swap(from.targets, targets_);
  from.have_inputs = have_inputs_;
  from.have_targets = have_targets_;
  Slot& to = slots_[static_cast<size_t>(j)];
  acts_ = to.acts;
  std::swap(to.inputs, inputs_);
  std::swap(to.targets, targets_);
  have_inputs_ = to.have_inputs;
  have_targets_ = to.have_targets;
  slot_ = j;
}

float* GPT::residual(int l) {
  const size_t BTC = static_cast<size_t>(B_) * T_ * config_.channels;
  return l == part_begin_ ? acts_.encoded : acts_.residual3 + (l - 1 - part_begin_) * BTC;
}

GPT::BlockActivations GPT::block_activations(int block) const {
  const size_t BT = static_cast<size_t>(B_) * T_, BTC = BT * config_.channels;
  const size_t BTCl = BT * static_cast<size_t>(local_channels_);
  const size_t NH = local_heads_;
  const auto l = static_cast<size_t>(block - part_begin_);   // within the part
  const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
  const Activations& a = acts_;
  return {a.ln1 + lr * BTC,      a.ln1_mean + l * BT,  a.ln1_rstd + l * BT,
          a.qkv + l * 3 * BTCl,  a.atty + lr * BTCl,   a.att + lr * BT * NH,
          a.residual2 + l * BTC, a.ln2 + lr * BTC,     a.ln2_mean + l * BT,
          a.ln2_rstd + l * BT,   a.fch + l * 4 * BTCl, a.fch_gelu + lr * 4 * BTCl,
          a.residual3 + l * BTC};
}

absl::Status GPT::check_blocks(int begin, int end, const char* what) const {
  if (B_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat("GPT::", what, ": call prepare() first"));
  }
  if (begin < 0 || begin > end || end > config_.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("GPT::", what, ": blocks [", begin, ", ", end,
                                                   ") are not within [0, ", config_.num_layers,
                                                   ")"));
  }
  if (begin < end && (begin < part_begin_ || end > part_end_)) {
    return absl::FailedPreconditionError(absl::StrCat("GPT::", what, ": blocks [", begin, ", ", end,
                                                      ") are outside its part [", part_begin_, ", ",
                                                      part_end_, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (absl::Status s = prepare(B, T); !s.ok()) return s;
  const size_t BT = static_cast<size_t>(B) * T;
  if (absl::Status s = check_tokens(inputs, BT, config_.vocab_size, "inputs"); !s.ok()) return s;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens(targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = embed_forward(inputs); !s.ok()) return s;
  if (absl::Status s = forward_blocks(0, config_.num_layers); !s.ok()) return s;
  return head_forward(targets);
}

absl::Status GPT::embed_forward(const int32_t* inputs) {
  if (B_ == 0) return absl::FailedPreconditionError("GPT::embed_forward: call prepare() first");
  if (part_begin_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPT::embed_forward: its part starts at block ", part_begin_));
  }
  const size_t BT = static_cast<size_t>(B_) * T_;
  if (absl::Status s = check_tokens(inputs, BT, config_.vocab_size, "inputs"); !s.ok()) return s;
  inputs_.assign(inputs, inputs + BT);
  have_inputs_ = true;
  if (sliced()) {
    return vocab_parallel_embedding_forward(
        acts_.encoded, inputs_.data(), param_tensors_.wte, param_tensors_.wpe, vocab_begin_,
        vocab_begin_ + local_vocab_, B_, T_, config_.channels, tp_sum_);
  }
  encoder_forward(acts_.encoded, inputs_.data(), param_tensors_.wte, param_tensors_.wpe, B_, T_,
                  config_.channels);
  return absl::OkStatus();
}

absl::Status GPT::forward_blocks(int begin, int end) {
  if (absl::Status s = check_blocks(begin, end, "forward_blocks"); !s.ok()) return s;
  for (int l = begin; l < end; ++l) {
    if (absl::Status s = block_forward(l); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GPT::block_forward(int l) {
  const int B = B_, T = T_, C = config_.channels;
  const int Cl = local_channels_, NHl = local_heads_;  // the whole C and NH for one rank
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const GPTBlockTensors& w = param_tensors_.blocks[l];
  const BlockActivations a = block_activations(l);
  const float* inp = residual(l);
  // With tensor parallelism qkv and fc are column-parallel (this rank's heads, its tp-th of the
  // MLP), attproj and fcproj row-parallel: their outputs are summed over the group.
  auto projection = [&](float* out, const float* in, const float* weight, const float* bias,
                        int in_channels) -> absl::Status {
    if (!sliced()) {
      linear_forward(out, in, weight, bias, B, T, in_channels, C);
      return absl::OkStatus();
    }
    return row_parallel_linear_forward(out, in, weight, bias, B, T, in_channels, C, tp_sum_);
  };
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, inp, w.ln1w, w.ln1b, B, T, C);
  linear_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * Cl);
  flash_attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl);
  // The projections are written straight into the residual sums: residual2 = inp + attproj.
  if (absl::Status s = projection(a.residual2, a.atty, w.attprojw, w.attprojb, Cl); !s.ok())
    return s;
  residual_forward(a.residual2, inp, a.residual2, BTC);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, B, T, C);
  linear_forward(a.fch, a.ln2, w.fcw, w.fcb, B, T, C, 4 * Cl);
  gelu_forward(a.fch_gelu, a.fch, 4 * static_cast<size_t>(B) * T * Cl);
  if (absl::Status s = projection(a.residual3, a.fch_gelu, w.fcprojw, w.fcprojb, 4 * Cl); !s.ok())
    return s;
  residual_forward(a.residual3, a.residual2, a.residual3, BTC);
  return absl::OkStatus();
}

absl::StatusOr<float> GPT::head_forward(const int32_t* targets) {
  if (B_ == 0) return absl::FailedPreconditionError("GPT::head_forward: call prepare() first");
  if (!part_head_) {
    return absl::FailedPreconditionError("GPT::head_forward: its part has no head (set_part)");
  }
  const int B = B_, T = T_, C = config_.channels;
  const size_t BT = static_cast<size_t>(B) * T;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens(targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, residual(config_.num_layers),
                    param_tensors_.lnfw, param_tensors_.lnfb, B, T, C);
  // The head is column-parallel over the vocabulary: this rank's logits are its rows of wte's.
  linear_forward(acts_.logits, acts_.lnf, param_tensors_.wte, nullptr, B, T, C, local_vocab_);
  have_targets_ = targets != nullptr;
  if (!have_targets_) return std::numeric_limits<float>::quiet_NaN();
  targets_.assign(targets, targets + BT);
  if (sliced()) {
    absl::StatusOr<float> loss = vocab_parallel_crossentropy_forward(
        acts_.losses, acts_.lse, acts_.logits, targets_.data(), vocab_begin_, local_vocab_,
        config_.vocab_size, B, T, tp_max_, tp_sum_);
    if (!loss.ok()) have_targets_ = false;
    return loss;
  }
  return crossentropy_forward(acts_.losses, acts_.lse, acts_.logits, targets_.data(), B, T,
                              config_.vocab_size, config_.padded_vocab());
}

absl::Status GPT::backward(float dloss) {
  if (absl::Status s = head_backward(dloss); !s.ok()) return s;
  if (absl::Status s = backward_blocks(0, config_.num_layers); !s.ok()) return s;
  return embed_backward();
}

absl::Status GPT::head_backward(float dloss) {
  if (!have_targets_) {
    return absl::FailedPreconditionError(
        "GPT::backward: the last forward had no targets; run forward with targets first");
  }
  const int B = B_, T = T_, C = config_.channels, V = config_.vocab_size;
  const int Vp = config_.padded_vocab();
  if (sliced()) {
    // Its columns of the vocabulary, padding included (which the loss leaves at zero).
    const size_t n = static_cast<size_t>(B) * T * local_vocab_;
    std::fill(dacts_.dlogits, dacts_.dlogits + n, 0.0f);
    vocab_parallel_crossentropy_backward(dacts_.dlogits, dloss, acts_.logits, acts_.lse,
                                         targets_.data(), vocab_begin_, local_vocab_, V, B, T);
  } else {
    crossentropy_backward(dacts_.dlogits, dloss, acts_.logits, acts_.lse, targets_.data(), B, T, V,
                          Vp, /*accumulate=*/false);
  }
  linear_backward(dacts_.dln, grad_tensors_.wte, nullptr, dacts_.dlogits, acts_.lnf,
                  param_tensors_.wte, B, T, C, local_vocab_, /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(dacts_.dln, static_cast<size_t>(B) * T * C); !s.ok())
    return s;
  layernorm_backward(dacts_.dresidual, grad_tensors_.lnfw, grad_tensors_.lnfb, dacts_.dln,
                     residual(config_.num_layers), param_tensors_.lnfw, acts_.lnf_mean,
                     acts_.lnf_rstd, B, T, C, /*accumulate_dinp=*/false);
  return absl::OkStatus();
}

absl::Status GPT::backward_blocks(int begin, int end, const GradientsFinal& on_final) {
  if (absl::Status s = check_blocks(begin, end, "backward_blocks"); !s.ok()) return s;
  for (int l = end - 1; l >= begin; --l) {
    if (options_.recompute_activations) block_recompute(l);
    if (absl::Status s = block_backward(l, on_final); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void GPT::block_recompute(int l) {
  const int B = B_, T = T_, C = config_.channels;
  const int Cl = local_channels_, NHl = local_heads_;
  const GPTBlockTensors& w = param_tensors_.blocks[l];
  const BlockActivations a = block_activations(l);
  // The same kernels on the same inputs as block_forward: bitwise the same values (mean and rstd
  // are rewritten with what they already hold).
  layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual(l), w.ln1w, w.ln1b, B, T, C);
  flash_attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl);
  layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, B, T, C);
  gelu_forward(a.fch_gelu, a.fch, 4 * static_cast<size_t>(B) * T * Cl);
}

absl::Status GPT::block_backward(int l, const GradientsFinal& on_final) {
  const int B = B_, T = T_, C = config_.channels;
  const int Cl = local_channels_, NHl = local_heads_;
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const size_t BTCl = static_cast<size_t>(B) * T * Cl;
  const GPTBlockTensors& w = param_tensors_.blocks[l];
  const GPTBlockTensors& dw = grad_tensors_.blocks[l];
  const BlockActivations a = block_activations(l);
  const ActivationGradients& d = dacts_;
  auto finished = [&](BlockTensor first_tensor) {
    if (on_final) on_final(layout_.block_tensor(l, first_tensor));
  };
  // d.dresidual holds d residual3. As residual3 = residual2 + fcproj, it is also d fcproj and
  // the first term of d residual2, which the ln2 branch then adds to in place; likewise through
  // residual2 = residual(l) + attproj down to d residual(l).
  // With tensor parallelism the row-parallel projections' backward is local (each rank computes
  // the replicated biases' whole gradient); the column-parallel layers' input gradients dln are
  // partial sums, summed over the group.
  linear_backward(d.dfch_gelu, dw.fcprojw, dw.fcprojb, d.dresidual, a.fch_gelu, w.fcprojw, B, T,
                  4 * Cl, C, /*accumulate_dinp=*/false);
  finished(BlockTensor::kFcprojw);
  gelu_backward(d.dfch, d.dfch_gelu, a.fch, 4 * BTCl, /*accumulate=*/false);
  linear_backward(d.dln, dw.fcw, dw.fcb, d.dfch, a.ln2, w.fcw, B, T, C, 4 * Cl,
                  /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(d.dln, BTC); !s.ok()) return s;
  finished(BlockTensor::kFcw);
  layernorm_backward(d.dresidual, dw.ln2w, dw.ln2b, d.dln, a.residual2, w.ln2w, a.ln2_mean,
                     a.ln2_rstd, B, T, C);
  finished(BlockTensor::kLn2w);
  linear_backward(d.datty, dw.attprojw, dw.attprojb, d.dresidual, a.atty, w.attprojw, B, T, Cl, C,
                  /*accumulate_dinp=*/false);
  finished(BlockTensor::kAttprojw);
  flash_attention_backward(d.dqkv, d.datty, a.qkv, a.atty, a.att, B, T, Cl, NHl,
                           /*accumulate=*/false);
  linear_backward(d.dln, dw.qkvw, dw.qkvb, d.dqkv, a.ln1, w.qkvw, B, T, C, 3 * Cl,
                  /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(d.dln, BTC); !s.ok()) return s;
  finished(BlockTensor::kQkvw);
  layernorm_backward(d.dresidual, dw.ln1w, dw.ln1b, d.dln, residual(l), w.ln1w, a.ln1_mean,
                     a.ln1_rstd, B, T, C);
  finished(BlockTensor::kLn1w);
  return absl::OkStatus();
}

absl::Status GPT::embed_backward() {
  if (!have_inputs_) {
    return absl::FailedPreconditionError(
        "GPT::embed_backward: no embed_forward for the current batch shape");
  }
  if (sliced()) {
    vocab_parallel_embedding_backward(grad_tensors_.wte, grad_tensors_.wpe, dacts_.dresidual,
                                      inputs_.data(), vocab_begin_, vocab_begin_ + local_vocab_, B_,
                                      T_, config_.channels);
    return absl::OkStatus();
  }
  encoder_backward(grad_tensors_.wte, grad_tensors_.wpe, dacts_.dresidual, inputs_.data(), B_, T_,
                   config_.channels);
  return absl::OkStatus();
}

absl::Status GPT::embed_backward_rows(float* rows, std::span<const int32_t> row_of, int num_rows) {
  if (sliced()) {
    return absl::FailedPreconditionError(
        "GPT::embed_backward_rows: a tensor-parallel rank holds only its rows of wte; use "
        "embed_backward");
  }
  if (!have_inputs_) {
    return absl::FailedPreconditionError(
        "GPT::embed_backward_rows: no embed_forward for the current batch shape");
  }
  if (row_of.size() < static_cast<size_t>(config_.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat("GPT::embed_backward_rows: row_of has ",
                                                   row_of.size(), " entries for a vocabulary of ",
                                                   config_.vocab_size));
  }
  const size_t n = static_cast<size_t>(B_) * T_;
  input_rows_.resize(n);
  for (size_t i = 0; i < n; i++) {
    const int32_t row = row_of[static_cast<size_t>(inputs_[i])];
    if (row < 0 || row >= num_rows) {
      return absl::InvalidArgumentError(absl::StrCat("GPT::embed_backward_rows: token ", inputs_[i],
                                                     " has row ", row, ", not in [0, ", num_rows,
                                                     ")"));
    }
    input_rows_[i] = row;
  }
  detail::embedding_rows_backward(rows, dacts_.dresidual, input_rows_.data(), n, 0, num_rows,
                                  config_.channels);
  detail::position_backward(grad_tensors_.wpe, dacts_.dresidual, B_, T_, config_.channels);
  return absl::OkStatus();
}

ModelMemory GPT::memory() const {
  ModelMemory m;
  m.parameters = params_.size() * sizeof(float);
  m.gradients = grads_.size() * sizeof(float);
  for (const Slot& slot : slots_)
    m.activations += slot.buffer.size() * sizeof(float);
  m.activation_gradients = dacts_buffer_.size() * sizeof(float);
  return m;
}

}  // namespace troupe::nn
