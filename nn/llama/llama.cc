#include "nn/llama/llama.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers/attention.h"
#include "nn/layers/crossentropy.h"
#include "nn/layers/detail/embedding.h"
#include "nn/layers/linear.h"
#include "nn/layers/parallel.h"
#include "nn/layers/residual.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/rope.h"
#include "nn/layers/swiglu.h"
#include "nn/model/init_rng.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

// The Llama initial values of whole-model tensor t into p (t.size floats), the random ones drawn
// from rng: the embedding and head normal(0, 0.02) on their V real rows and 0 on the padding,
// o_proj and down_proj normal(0, 0.02 / sqrt(2L)), the other matrices normal(0, 0.02), the norm
// weights 1.
void fill_initial(const LlamaConfig& config, InitRng& rng, const ParamTensor& t, float* p) {
  constexpr double kStd = 0.02;
  if (t.shape.size() == 1) {
    std::fill(p, p + t.size, 1.0f);
  } else if (t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight") {
    const size_t real = static_cast<size_t>(config.vocab_size) * config.hidden_size;
    rng.fill_normal(p, real, kStd);
    std::fill(p + real, p + t.size, 0.0f);
  } else if (t.name.ends_with("o_proj.weight") || t.name.ends_with("down_proj.weight")) {
    rng.fill_normal(p, t.size, kStd / std::sqrt(2.0 * config.num_hidden_layers));
  } else {
    rng.fill_normal(p, t.size, kStd);
  }
}

absl::Status check_tokens(const int32_t* tokens, size_t n, int V, const char* what) {
  if (tokens == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("Llama: ", what, " is null"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return absl::InvalidArgumentError(absl::StrCat("Llama: ", what, "[", i, "] = ", tokens[i],
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

// Split across the kernels' threads, in whole cache lines.
void zero(float* p, size_t n) {
  if (n < (size_t{1} << 16) || num_threads() == 1) {
    if (n > 0) std::memset(p, 0, n * sizeof(float));
    return;
  }
#pragma omp parallel num_threads(num_threads())
  {
    const int nth = omp_get_num_threads(), tid = omp_get_thread_num();
    const size_t lines = (n + 15) / 16;
    const size_t begin = std::min(n, lines * tid / nth * 16);
    const size_t end = std::min(n, lines * (tid + 1) / nth * 16);
    std::memset(p + begin, 0, (end - begin) * sizeof(float));
  }
}

absl::Status reset_zeroed(FloatBuffer& buffer, MemoryCategory category, size_t n) {
  if (absl::Status s = buffer.reset(category, n, /*zero=*/false); !s.ok()) return s;
  zero(buffer.data(), n);
  return absl::OkStatus();
}

// out[B*T, C] = table[inp] (rows of the whole vocabulary).
void embedding_forward(float* out, const int32_t* inp, const float* table, size_t BT, int C) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (size_t row = 0; row < BT; row++) {
    std::memcpy(out + row * C, table + static_cast<size_t>(inp[row]) * C, sizeof(float) * C);
  }
}

}  // namespace

absl::StatusOr<Llama> Llama::create(const LlamaConfig& config, const ModelOptions& options,
                                    const ModelStorage& storage, const TensorSlice& slice) {
  if (absl::Status s = config.validate(); !s.ok()) return s;
  if (absl::Status s = validate_slice(config, slice); !s.ok()) return s;
  Llama llama(config, options, storage, slice);
  const size_t n = llama.layout_.num_params();
  // Unbound tensors are null until the caller binds them.
  if (storage.parameters) {
    if (absl::Status s = reset_zeroed(llama.params_, MemoryCategory::kParameters, n); !s.ok())
      return s;
    llama.point(llama.param_tensors_, 0, n, llama.params_.data());
  }
  if (storage.gradients) {
    if (absl::Status s = reset_zeroed(llama.grads_, MemoryCategory::kGradients, n); !s.ok())
      return s;
    llama.point(llama.grad_tensors_, 0, n, llama.grads_.data());
  }
  return llama;
}

Llama::Llama(const LlamaConfig& config, const ModelOptions& options, const ModelStorage& storage,
             const TensorSlice& slice)
    : config_(config),
      model_config_(config),
      options_(options),
      storage_(storage),
      layout_(config, slice),
      local_heads_(config.num_attention_heads / slice.size),
      local_kv_heads_(config.kv_heads() / slice.size),
      local_mlp_(config.intermediate_size / slice.size),
      local_vocab_(config.padded_vocab() / slice.size),
      vocab_begin_(slice.rank * (config.padded_vocab() / slice.size)),
      part_end_(config.num_hidden_layers),
      slots_(1) {
  const size_t tensors = layout_.model().tensors().size();
  param_tensors_ = {std::vector<float*>(tensors, nullptr), config.tie_word_embeddings};
  grad_tensors_ = param_tensors_;
  const int hd = config.head_dim(), maxT = config.max_position_embeddings;
  rope_cos_.resize(static_cast<size_t>(maxT) * (hd / 2));
  rope_sin_.resize(rope_cos_.size());
  rope_table(rope_cos_.data(), rope_sin_.data(), maxT, hd, config.rope_theta);
}

void Llama::set_tensor_parallel(AllReduceFn allreduce_sum, AllReduceFn allreduce_max) {
  tp_sum_ = std::move(allreduce_sum);
  tp_max_ = std::move(allreduce_max);
}

absl::Status Llama::sum_over_slices(float* data, size_t count) const {
  if (!sliced()) return absl::OkStatus();
  return tp_sum_(data, count);
}

// --- Parameters: binding and initialisation. ---

void Llama::point(Tensors& tensors, size_t begin, size_t end, float* base) const {
  const std::vector<ParamTensor>& all = layout().tensors();
  for (size_t i = 0; i < all.size(); ++i) {
    const ParamTensor& t = all[i];
    if (t.offset < begin || t.offset + t.size > end || t.size == 0) continue;
    tensors.at[i] = base + (t.offset - begin);
  }
}

absl::Status Llama::bind(Tensors& tensors, size_t begin, size_t end, float* base, bool owned,
                         const char* what) {
  if (owned) {
    return absl::FailedPreconditionError(
        absl::StrCat("Llama::bind_", what, ": the model owns its ", what));
  }
  if (absl::Status s = layout().check_range(begin, end); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Llama::bind_", what, ": ", s.message()));
  }
  point(tensors, begin, end, base);
  return absl::OkStatus();
}

absl::Status Llama::bind_parameters(size_t begin, size_t end, float* base) {
  return bind(param_tensors_, begin, end, base, storage_.parameters, "parameters");
}

absl::Status Llama::bind_gradients(size_t begin, size_t end, float* base) {
  return bind(grad_tensors_, begin, end, base, storage_.gradients, "gradients");
}

void Llama::init_parameters(uint64_t seed) {
  if (params_.data() == nullptr) return;  // bound parameters are the caller's to fill
  init_parameters(config_, layout().slice(), seed, 0, num_params(), params_.data());
}

void Llama::init_parameters(const LlamaConfig& config, const TensorSlice& slice, uint64_t seed,
                            size_t begin, size_t end, float* out) {
  // The whole model's values a tensor at a time (the generator runs through them all in buffer
  // order), the parts of the slice's runs that fall in [begin, end) copied out: the memory of one
  // tensor, not of the whole model.
  const LlamaLayout whole(config), sliced(config, slice);
  struct Run {
    size_t whole, slice, n;
  };
  std::vector<Run> runs;  // ascending in both buffers
  for_each_slice_run(whole.model(), sliced.model(), [&](size_t w, size_t s, size_t n) {
    runs.push_back({w, s, n});
  });
  InitRng rng(seed);
  std::vector<float> values;
  size_t next = 0;  // the first run that does not end before the current tensor
  for (const ParamTensor& t : whole.model().tensors()) {
    const size_t t_end = t.offset + t.size;
    values.resize(t.size);
    fill_initial(config, rng, t, values.data());
    for (size_t i = next; i < runs.size() && runs[i].whole < t_end; ++i) {
      const Run& r = runs[i];
      const size_t w0 = std::max(r.whole, t.offset), w1 = std::min(r.whole + r.n, t_end);
      if (w0 >= w1) continue;
      const size_t s0 = r.slice + (w0 - r.whole);
      const size_t from = std::max(begin, s0), to = std::min(end, s0 + (w1 - w0));
      if (from >= to) continue;
      const float* src = values.data() + (w0 - t.offset) + (from - s0);
      std::copy(src, src + (to - from), out + (from - begin));
    }
    while (next < runs.size() && runs[next].whole + runs[next].n <= t_end)
      ++next;
  }
}

void Llama::zero_grad() {
  zero(grads_.data(), grads_.size());
}

// --- Activations: parts, slots and their buffers. ---

size_t Llama::carve_activations(int B, int T, float* base, Activations* acts) const {
  // The attention's and the MLP's tensors are a tensor-parallel rank's slice, the residual
  // stream and the norms whole on every rank.
  const size_t C = config_.hidden_size, hd = config_.head_dim();
  const size_t Q = local_heads_ * hd, QKV = (local_heads_ + 2 * local_kv_heads_) * hd;
  const size_t I = local_mlp_, NH = local_heads_;
  const size_t L = static_cast<size_t>(part_end_ - part_begin_);  // the part's blocks
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
  const size_t Vl = part_head_ ? static_cast<size_t>(local_vocab_) : 0;
  const size_t HBT = part_head_ ? BT : 0;                    // the head's per-position values
  const size_t Lr = options_.recompute_activations ? 1 : L;  // blocks of recomputed tensors
  Carver c(base);
  Activations a;
  a.encoded = c.take(BTC);
  a.ln1 = c.take(Lr * BTC);
  a.ln1_rstd = c.take(L * BT);
  a.qkv = c.take(L * BT * QKV);
  a.qkvr = c.take(Lr * BT * 3 * Q);
  a.atty = c.take(Lr * BT * Q);
  a.att = c.take(Lr * BT * NH);
  a.residual2 = c.take(L * BTC);
  a.ln2 = c.take(Lr * BTC);
  a.ln2_rstd = c.take(L * BT);
  a.gu = c.take(L * BT * 2 * I);
  a.mlp = c.take(Lr * BT * I);
  a.residual3 = c.take(L * BTC);
  a.lnf = c.take(HBT * C);
  a.lnf_rstd = c.take(HBT);
  a.logits = c.take(HBT * Vl);
  a.lse = c.take(HBT);
  a.losses = c.take(HBT);
  if (acts != nullptr) *acts = a;
  return c.used();
}

size_t Llama::carve_activation_gradients(int B, int T, float* base,
                                         ActivationGradients* dacts) const {
  const size_t C = config_.hidden_size, hd = config_.head_dim();
  const size_t Q = local_heads_ * hd, QKV = (local_heads_ + 2 * local_kv_heads_) * hd;
  const size_t BT = static_cast<size_t>(B) * T, I = local_mlp_;
  Carver c(base);
  ActivationGradients d;
  d.dresidual = c.take(BT * C);
  d.dln = c.take(BT * C);
  d.datty = c.take(BT * Q);
  d.dqkvr = c.take(BT * 3 * Q);
  d.dqkv = c.take(BT * QKV);
  d.dgu = c.take(BT * 2 * I);
  d.dmlp = c.take(BT * I);
  d.dlogits = c.take(part_head_ ? BT * static_cast<size_t>(local_vocab_) : 0);
  if (dacts != nullptr) *dacts = d;
  return c.used();
}

absl::Status Llama::prepare(int B, int T) {
  const int maxT = config_.max_position_embeddings;
  if (B < 1 || T < 1 || T > maxT) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama: batch B = ", B, ", T = ", T,
                     " needs B >= 1 and 1 <= T <= max_position_embeddings = ", maxT));
  }
  // The kernels index one block's tensors with int.
  const int64_t BT = int64_t{B} * T;
  const int64_t qkv =
      int64_t{config_.num_attention_heads + 2 * config_.kv_heads()} * config_.head_dim();
  const int64_t widest =
      std::max({int64_t{2} * config_.intermediate_size, int64_t{config_.padded_vocab()}, qkv,
                int64_t{3} * config_.hidden_size});
  if (BT * widest > INT_MAX || BT * config_.num_attention_heads * T > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("Llama: batch B = ", B, ", T = ", T,
                                                   " makes an activation over INT_MAX elements"));
  }
  if (sliced() && (!tp_sum_ || !tp_max_)) {
    return absl::FailedPreconditionError(
        absl::StrCat("Llama: tensor-parallel rank ", layout().slice().rank, " of ",
                     layout().slice().size, " has no group to reduce over (set_tensor_parallel)"));
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
  have_inputs_ = have_targets_ = false;
  return absl::OkStatus();
}

absl::Status Llama::set_part(int block_begin, int block_end, bool head) {
  const int L = config_.num_hidden_layers;
  if (block_begin < 0 || block_begin >= block_end || block_end > L || (head && block_end != L)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Llama::set_part: blocks [", block_begin, ", ", block_end, ")",
        head ? " with the head" : "", " of ", L, ": a part is a non-empty range within [0, ", L,
        ") and has the head only if it ends at the last block"));
  }
  part_begin_ = block_begin;
  part_end_ = block_end;
  part_head_ = head;
  forget_activations();
  return absl::OkStatus();
}

absl::Status Llama::set_activation_slots(int n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Llama::set_activation_slots: ", n, " slots (at least one)"));
  }
  use_slot(0);
  slots_.resize(static_cast<size_t>(n));
  forget_activations();
  return absl::OkStatus();
}

int Llama::activation_slots() const {
  return static_cast<int>(slots_.size());
}

void Llama::forget_activations() {
  B_ = T_ = 0;  // carved again by the next prepare
  have_inputs_ = have_targets_ = false;
  for (Slot& slot : slots_)
    slot.have_inputs = slot.have_targets = false;
}

void Llama::use_slot(int j) {
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

const float* Llama::logits() const {
  return acts_.logits;
}

float* Llama::residual(int l) {
  const size_t BTC = static_cast<size_t>(B_) * T_ * config_.hidden_size;
  return l == part_begin_ ? acts_.encoded : acts_.residual3 + (l - 1 - part_begin_) * BTC;
}

float* Llama::dresidual() {
  return dacts_.dresidual;
}

Llama::BlockActivations Llama::block_activations(int block) const {
  const size_t BT = static_cast<size_t>(B_) * T_, BTC = BT * config_.hidden_size;
  const size_t hd = config_.head_dim(), NH = local_heads_, I = local_mlp_;
  const size_t Q = NH * hd, QKV = (NH + 2 * local_kv_heads_) * hd;
  const auto l = static_cast<size_t>(block - part_begin_);   // within the part
  const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
  const Activations& a = acts_;
  return {a.ln1 + lr * BTC,         a.ln1_rstd + l * BT,  a.qkv + l * BT * QKV,
          a.qkvr + lr * BT * 3 * Q, a.atty + lr * BT * Q, a.att + lr * BT * NH,
          a.residual2 + l * BTC,    a.ln2 + lr * BTC,     a.ln2_rstd + l * BT,
          a.gu + l * BT * 2 * I,    a.mlp + lr * BT * I,  a.residual3 + l * BTC};
}

absl::Status Llama::check_blocks(int begin, int end, const char* what) const {
  const int L = config_.num_hidden_layers;
  if (B_ == 0) {
    return absl::FailedPreconditionError(absl::StrCat("Llama::", what, ": call prepare() first"));
  }
  if (begin < 0 || begin > end || end > L) {
    return absl::InvalidArgumentError(absl::StrCat("Llama::", what, ": blocks [", begin, ", ", end,
                                                   ") are not within [0, ", L, ")"));
  }
  if (begin < end && (begin < part_begin_ || end > part_end_)) {
    return absl::FailedPreconditionError(absl::StrCat("Llama::", what, ": blocks [", begin, ", ",
                                                      end, ") are outside its part [", part_begin_,
                                                      ", ", part_end_, ")"));
  }
  return absl::OkStatus();
}

// --- Forward. ---

absl::StatusOr<float> Llama::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (absl::Status s = prepare(B, T); !s.ok()) return s;
  const size_t BT = static_cast<size_t>(B) * T;
  if (absl::Status s = check_tokens(inputs, BT, config_.vocab_size, "inputs"); !s.ok()) return s;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens(targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = embed_forward(inputs); !s.ok()) return s;
  if (absl::Status s = forward_blocks(0, config_.num_hidden_layers); !s.ok()) return s;
  return head_forward(targets);
}

absl::Status Llama::embed_forward(const int32_t* inputs) {
  if (B_ == 0) return absl::FailedPreconditionError("Llama::embed_forward: call prepare() first");
  if (part_begin_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Llama::embed_forward: its part starts at block ", part_begin_));
  }
  const size_t BT = static_cast<size_t>(B_) * T_;
  if (absl::Status s = check_tokens(inputs, BT, config_.vocab_size, "inputs"); !s.ok()) return s;
  inputs_.assign(inputs, inputs + BT);
  have_inputs_ = true;
  const float* table = param_tensors_.embed_tokens();
  if (sliced()) {
    return vocab_parallel_embedding_forward(acts_.encoded, inputs_.data(), table,
                                            /*wpe=*/nullptr, vocab_begin_,
                                            vocab_begin_ + local_vocab_, B_, T_,
                                            config_.hidden_size, tp_sum_);
  }
  embedding_forward(acts_.encoded, inputs_.data(), table, BT, config_.hidden_size);
  return absl::OkStatus();
}

absl::Status Llama::forward_blocks(int begin, int end) {
  if (absl::Status s = check_blocks(begin, end, "forward_blocks"); !s.ok()) return s;
  for (int l = begin; l < end; ++l) {
    if (absl::Status s = block_forward(l); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Llama::project_rows(float* out, const float* in, const float* weight,
                                 int in_channels) {
  const int C = config_.hidden_size;
  if (!sliced()) {
    linear_forward(out, in, weight, nullptr, B_, T_, in_channels, C);
    return absl::OkStatus();
  }
  return row_parallel_linear_forward(out, in, weight, nullptr, B_, T_, in_channels, C, tp_sum_);
}

absl::Status Llama::block_forward(int l) {
  const int B = B_, T = T_, C = config_.hidden_size, hd = config_.head_dim();
  const int NH = local_heads_, KV = local_kv_heads_, I = local_mlp_;  // this rank's
  const int Q = NH * hd, QKV = (NH + 2 * KV) * hd;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const BlockActivations a = block_activations(l);
  auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
  const float* inp = residual(l);
  // q k v and gate up are column-parallel (this rank's heads, its part of the MLP), o and down
  // row-parallel: their outputs are summed over the group (project_rows), written straight into
  // the residual sums.
  rmsnorm_forward(a.ln1, a.ln1_rstd, inp, w(LlamaTensor::kInputNorm), B, T, C, eps);
  linear_forward(a.qkv, a.ln1, w(LlamaTensor::kQ), nullptr, B, T, C, QKV);
  rope_qkv_forward(a.qkvr, a.qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, KV, hd);
  flash_attention_forward(a.atty, a.att, a.qkvr, B, T, Q, NH);
  if (absl::Status s = project_rows(a.residual2, a.atty, w(LlamaTensor::kO), Q); !s.ok()) return s;
  residual_forward(a.residual2, inp, a.residual2, BTC);
  rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, w(LlamaTensor::kPostNorm), B, T, C, eps);
  linear_forward(a.gu, a.ln2, w(LlamaTensor::kGate), nullptr, B, T, C, 2 * I);
  swiglu_forward(a.mlp, a.gu, B, T, I);
  if (absl::Status s = project_rows(a.residual3, a.mlp, w(LlamaTensor::kDown), I); !s.ok())
    return s;
  residual_forward(a.residual3, a.residual2, a.residual3, BTC);
  return absl::OkStatus();
}

absl::StatusOr<float> Llama::head_forward(const int32_t* targets) {
  if (B_ == 0) return absl::FailedPreconditionError("Llama::head_forward: call prepare() first");
  if (!part_head_) {
    return absl::FailedPreconditionError("Llama::head_forward: its part has no head (set_part)");
  }
  const int B = B_, T = T_, C = config_.hidden_size;
  const size_t BT = static_cast<size_t>(B) * T;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens(targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  rmsnorm_forward(acts_.lnf, acts_.lnf_rstd, residual(config_.num_hidden_layers),
                  param_tensors_.norm(), B, T, C, static_cast<float>(config_.rms_norm_eps));
  // The head is column-parallel over the vocabulary: this rank's logits are its rows'.
  linear_forward(acts_.logits, acts_.lnf, param_tensors_.lm_head(), nullptr, B, T, C, local_vocab_);
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

// --- Backward. ---

absl::Status Llama::backward(float dloss) {
  if (absl::Status s = head_backward(dloss); !s.ok()) return s;
  if (absl::Status s = backward_blocks(0, config_.num_hidden_layers); !s.ok()) return s;
  return embed_backward();
}

absl::Status Llama::head_backward(float dloss) {
  if (!have_targets_) {
    return absl::FailedPreconditionError(
        "Llama::backward: the last forward had no targets; run forward with targets first");
  }
  const int B = B_, T = T_, C = config_.hidden_size, V = config_.vocab_size;
  if (sliced()) {
    // Its columns of the vocabulary, padding included (which the loss leaves at zero).
    const size_t n = static_cast<size_t>(B) * T * local_vocab_;
    std::fill(dacts_.dlogits, dacts_.dlogits + n, 0.0f);
    vocab_parallel_crossentropy_backward(dacts_.dlogits, dloss, acts_.logits, acts_.lse,
                                         targets_.data(), vocab_begin_, local_vocab_, V, B, T);
  } else {
    crossentropy_backward(dacts_.dlogits, dloss, acts_.logits, acts_.lse, targets_.data(), B, T, V,
                          config_.padded_vocab(), /*accumulate=*/false);
  }
  // A tied head's weight gradient accumulates into the embedding's.
  linear_backward(dacts_.dln, grad_tensors_.lm_head(), nullptr, dacts_.dlogits, acts_.lnf,
                  param_tensors_.lm_head(), B, T, C, local_vocab_, /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(dacts_.dln, static_cast<size_t>(B) * T * C); !s.ok())
    return s;
  rmsnorm_backward(dacts_.dresidual, grad_tensors_.norm(), dacts_.dln,
                   residual(config_.num_hidden_layers), param_tensors_.norm(), acts_.lnf_rstd, B, T,
                   C, /*accumulate_dinp=*/false);
  return absl::OkStatus();
}

absl::Status Llama::backward_blocks(int begin, int end, const GradientsFinal& on_final) {
  if (absl::Status s = check_blocks(begin, end, "backward_blocks"); !s.ok()) return s;
  for (int l = end - 1; l >= begin; --l) {
    if (options_.recompute_activations) block_recompute(l);
    if (absl::Status s = block_backward(l, on_final); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Llama::block_recompute(int l) {
  const int B = B_, T = T_, C = config_.hidden_size, hd = config_.head_dim();
  const int NH = local_heads_, KV = local_kv_heads_, I = local_mlp_;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const BlockActivations a = block_activations(l);
  auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
  // The same kernels on the same inputs as block_forward: bitwise the same values (the norms'
  // rstd are rewritten with what they already hold).
  rmsnorm_forward(a.ln1, a.ln1_rstd, residual(l), w(LlamaTensor::kInputNorm), B, T, C, eps);
  rope_qkv_forward(a.qkvr, a.qkv, rope_cos_.data(), rope_sin_.data(), B, T, NH, KV, hd);
  flash_attention_forward(a.atty, a.att, a.qkvr, B, T, NH * hd, NH);
  rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, w(LlamaTensor::kPostNorm), B, T, C, eps);
  swiglu_forward(a.mlp, a.gu, B, T, I);
}

absl::Status Llama::block_backward(int l, const GradientsFinal& on_final) {
  const int B = B_, T = T_, C = config_.hidden_size, hd = config_.head_dim();
  const int NH = local_heads_, KV = local_kv_heads_, I = local_mlp_;
  const int Q = NH * hd, QKV = (NH + 2 * KV) * hd;
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const BlockActivations a = block_activations(l);
  const ActivationGradients& d = dacts_;
  auto w = [&](LlamaTensor t) { return param_tensors_.block(l, t); };
  auto dw = [&](LlamaTensor t) { return grad_tensors_.block(l, t); };
  auto finished = [&](LlamaTensor first_tensor) {
    if (on_final) on_final(layout_.block_tensor(l, first_tensor));
  };
  // d.dresidual holds d residual3. As residual3 = residual2 + down, it is also d down and the
  // first term of d residual2, which the post-attention norm's branch then adds to in place;
  // likewise through residual2 = residual(l) + o down to d residual(l).
  // With tensor parallelism the row-parallel projections' backward is local; the column-parallel
  // layers' input gradients dln are partial sums, summed over the group.
  linear_backward(d.dmlp, dw(LlamaTensor::kDown), nullptr, d.dresidual, a.mlp,
                  w(LlamaTensor::kDown), B, T, I, C, /*accumulate_dinp=*/false);
  finished(LlamaTensor::kDown);
  swiglu_backward(d.dgu, d.dmlp, a.gu, B, T, I);
  linear_backward(d.dln, dw(LlamaTensor::kGate), nullptr, d.dgu, a.ln2, w(LlamaTensor::kGate), B, T,
                  C, 2 * I, /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(d.dln, BTC); !s.ok()) return s;
  finished(LlamaTensor::kGate);
  rmsnorm_backward(d.dresidual, dw(LlamaTensor::kPostNorm), d.dln, a.residual2,
                   w(LlamaTensor::kPostNorm), a.ln2_rstd, B, T, C);
  finished(LlamaTensor::kPostNorm);
  linear_backward(d.datty, dw(LlamaTensor::kO), nullptr, d.dresidual, a.atty, w(LlamaTensor::kO), B,
                  T, Q, C, /*accumulate_dinp=*/false);
  finished(LlamaTensor::kO);
  flash_attention_backward(d.dqkvr, d.datty, a.qkvr, a.atty, a.att, B, T, Q, NH,
                           /*accumulate=*/false);
  rope_qkv_backward(d.dqkv, d.dqkvr, rope_cos_.data(), rope_sin_.data(), B, T, NH, KV, hd);
  linear_backward(d.dln, dw(LlamaTensor::kQ), nullptr, d.dqkv, a.ln1, w(LlamaTensor::kQ), B, T, C,
                  QKV, /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(d.dln, BTC); !s.ok()) return s;
  finished(LlamaTensor::kQ);
  rmsnorm_backward(d.dresidual, dw(LlamaTensor::kInputNorm), d.dln, residual(l),
                   w(LlamaTensor::kInputNorm), a.ln1_rstd, B, T, C);
  finished(LlamaTensor::kInputNorm);
  return absl::OkStatus();
}

absl::Status Llama::check_inputs_for_backward(const char* what) const {
  if (!have_inputs_) {
    return absl::FailedPreconditionError(
        absl::StrCat("Llama::", what, ": no embed_forward for the current batch shape"));
  }
  return absl::OkStatus();
}

absl::Status Llama::embed_backward() {
  if (absl::Status s = check_inputs_for_backward("embed_backward"); !s.ok()) return s;
  // One rank's rows [vocab_begin_, + local_vocab_); the whole vocabulary for one rank.
  detail::embedding_rows_backward(grad_tensors_.embed_tokens(), dacts_.dresidual, inputs_.data(),
                                  static_cast<size_t>(B_) * T_, vocab_begin_,
                                  vocab_begin_ + local_vocab_, config_.hidden_size);
  return absl::OkStatus();
}

absl::Status Llama::embed_backward_rows(float* rows, std::span<const int32_t> row_of,
                                        int num_rows) {
  if (sliced()) {
    return absl::FailedPreconditionError(
        "Llama::embed_backward_rows: a tensor-parallel rank holds only its rows of the "
        "embedding; use embed_backward");
  }
  if (absl::Status s = check_inputs_for_backward("embed_backward_rows"); !s.ok()) return s;
  if (row_of.size() < static_cast<size_t>(config_.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat("Llama::embed_backward_rows: row_of has ",
                                                   row_of.size(), " entries for a vocabulary of ",
                                                   config_.vocab_size));
  }
  const size_t n = static_cast<size_t>(B_) * T_;
  input_rows_.resize(n);
  for (size_t i = 0; i < n; i++) {
    const int32_t row = row_of[static_cast<size_t>(inputs_[i])];
    if (row < 0 || row >= num_rows) {
      return absl::InvalidArgumentError(absl::StrCat("Llama::embed_backward_rows: token ",
                                                     inputs_[i], " has row ", row, ", not in [0, ",
                                                     num_rows, ")"));
    }
    input_rows_[i] = row;
  }
  detail::embedding_rows_backward(rows, dacts_.dresidual, input_rows_.data(), n, 0, num_rows,
                                  config_.hidden_size);
  return absl::OkStatus();
}

ModelMemory Llama::memory() const {
  ModelMemory m;
  m.parameters = params_.size() * sizeof(float);
  m.gradients = grads_.size() * sizeof(float);
  for (const Slot& slot : slots_)
    m.activations += slot.buffer.size() * sizeof(float);
  m.activation_gradients = dacts_buffer_.size() * sizeof(float);
  return m;
}

}  // namespace troupe::nn
