// The Llama model's state: creation, its parameters (binding, initialisation) and its
// activations (parts, slots, buffers). The passes that compute are in passes.cc.
#include "nn/llama/llama.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers/rope.h"
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
      store_("Llama", config.num_hidden_layers) {
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
  point_llama_tensors(layout(), begin, end, base, &tensors);
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
  zero_floats(grads_.data(), grads_.size());
}

// --- Activations: parts, slots and their buffers. ---

size_t Llama::carve_activations(int B, int T, float* base, Activations* acts) const {
  // The attention's and the MLP's tensors are a tensor-parallel rank's slice, the residual
  // stream and the norms whole on every rank.
  const size_t C = config_.hidden_size, hd = config_.head_dim();
  const size_t Q = local_heads_ * hd, QKV = (local_heads_ + 2 * local_kv_heads_) * hd;
  const size_t I = local_mlp_, NH = local_heads_;
  const size_t L =
      static_cast<size_t>(store_.part_end() - store_.part_begin());  // the part's blocks
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
  const size_t Vl = store_.part_head() ? static_cast<size_t>(local_vocab_) : 0;
  const size_t HBT = store_.part_head() ? BT : 0;            // the head's per-position values
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
  d.dlogits = c.take(store_.part_head() ? BT * static_cast<size_t>(local_vocab_) : 0);
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
  return store_.prepare(
      B, T, [&](float* base, Activations* a) { return carve_activations(B, T, base, a); },
      [&](float* base, ActivationGradients* d) {
        return carve_activation_gradients(B, T, base, d);
      });
}

absl::Status Llama::set_part(int block_begin, int block_end, bool head) {
  return store_.set_part(block_begin, block_end, head);
}

absl::Status Llama::set_activation_slots(int n) {
  return store_.set_slots(n);
}

int Llama::activation_slots() const {
  return store_.slots();
}

void Llama::use_slot(int j) {
  store_.use_slot(j);
}

const float* Llama::logits() const {
  return store_.acts().logits;
}

float* Llama::residual(int l) {
  const size_t BTC = store_.BT() * config_.hidden_size;
  return l == store_.part_begin() ? store_.acts().encoded
                                  : store_.acts().residual3 + (l - 1 - store_.part_begin()) * BTC;
}

float* Llama::dresidual() {
  return store_.grads().dresidual;
}

Llama::BlockActivations Llama::block_activations(int block) const {
  const size_t BT = store_.BT(), BTC = BT * config_.hidden_size;
  const size_t hd = config_.head_dim(), NH = local_heads_, I = local_mlp_;
  const size_t Q = NH * hd, QKV = (NH + 2 * local_kv_heads_) * hd;
  const auto l = static_cast<size_t>(block - store_.part_begin());  // within the part
  const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
  const Activations& a = store_.acts();
  return {a.ln1 + lr * BTC,         a.ln1_rstd + l * BT,  a.qkv + l * BT * QKV,
          a.qkvr + lr * BT * 3 * Q, a.atty + lr * BT * Q, a.att + lr * BT * NH,
          a.residual2 + l * BTC,    a.ln2 + lr * BTC,     a.ln2_rstd + l * BT,
          a.gu + l * BT * 2 * I,    a.mlp + lr * BT * I,  a.residual3 + l * BTC};
}

ModelMemory Llama::memory() const {
  return {.parameters = params_.size() * sizeof(float),
          .gradients = grads_.size() * sizeof(float),
          .activations = store_.activation_bytes(),
          .activation_gradients = store_.scratch_bytes()};
}

}  // namespace troupe::nn
