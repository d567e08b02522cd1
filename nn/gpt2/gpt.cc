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
      store_("GPT", config.num_layers) {}

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
  zero_floats(grads_.data(), grads_.size());
}

size_t GPT::carve_activations(int B, int T, float* base, Activations* acts) const {
  // The attention's and the MLP's tensors are a tensor-parallel rank's slice (Cl, NHl), the
  // residual stream and the LayerNorms whole on every rank.
  const size_t C = config_.channels, NH = local_heads_;
  const size_t L =
      static_cast<size_t>(store_.part_end() - store_.part_begin());  // the part's blocks
  const size_t BT = static_cast<size_t>(B) * T, BTC = BT * C;
  const size_t BTCl = BT * static_cast<size_t>(local_channels_);
  const size_t Vp = store_.part_head() ? static_cast<size_t>(local_vocab_) : 0;
  const size_t HBT = store_.part_head() ? BT : 0;            // the head's per-position values
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
  d.dlogits = c.take(store_.part_head() ? BT * static_cast<size_t>(local_vocab_) : 0);
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
  return store_.prepare(
      B, T, [&](float* base, Activations* a) { return carve_activations(B, T, base, a); },
      [&](float* base, ActivationGradients* d) {
        return carve_activation_gradients(B, T, base, d);
      });
}

absl::Status GPT::set_part(int block_begin, int block_end, bool head) {
  return store_.set_part(block_begin, block_end, head);
}

absl::Status GPT::set_activation_slots(int n) {
  return store_.set_slots(n);
}

void GPT::use_slot(int j) {
  store_.use_slot(j);
}

float* GPT::residual(int l) {
  const size_t BTC = store_.BT() * config_.channels;
  const int begin = store_.part_begin();
  return l == begin ? store_.acts().encoded : store_.acts().residual3 + (l - 1 - begin) * BTC;
}

GPT::BlockActivations GPT::block_activations(int block) const {
  const size_t BT = store_.BT(), BTC = BT * config_.channels;
  const size_t BTCl = BT * static_cast<size_t>(local_channels_);
  const size_t NH = local_heads_;
  const auto l = static_cast<size_t>(block - store_.part_begin());  // within the part
  const size_t lr = options_.recompute_activations ? 0 : l;  // recomputed: the one shared block
  const Activations& a = store_.acts();
  return {a.ln1 + lr * BTC,      a.ln1_mean + l * BT,  a.ln1_rstd + l * BT,
          a.qkv + l * 3 * BTCl,  a.atty + lr * BTCl,   a.att + lr * BT * NH,
          a.residual2 + l * BTC, a.ln2 + lr * BTC,     a.ln2_mean + l * BT,
          a.ln2_rstd + l * BT,   a.fch + l * 4 * BTCl, a.fch_gelu + lr * 4 * BTCl,
          a.residual3 + l * BTC};
}

absl::StatusOr<float> GPT::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (absl::Status s = prepare(B, T); !s.ok()) return s;
  const size_t BT = static_cast<size_t>(B) * T;
  if (absl::Status s = check_tokens("GPT", inputs, BT, config_.vocab_size, "inputs"); !s.ok())
    return s;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens("GPT", targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = embed_forward(inputs); !s.ok()) return s;
  if (absl::Status s = forward_blocks(0, config_.num_layers); !s.ok()) return s;
  return head_forward(targets);
}

absl::Status GPT::embed_forward(const int32_t* inputs) {
  if (absl::Status s = store_.check_prepared("embed_forward"); !s.ok()) return s;
  if (store_.part_begin() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPT::embed_forward: its part starts at block ", store_.part_begin()));
  }
  if (absl::Status s = check_tokens("GPT", inputs, store_.BT(), config_.vocab_size, "inputs");
      !s.ok()) {
    return s;
  }
  store_.set_inputs(inputs);
  if (sliced()) {
    return vocab_parallel_embedding_forward(store_.acts().encoded, store_.inputs(),
                                            param_tensors_.wte, param_tensors_.wpe, vocab_begin_,
                                            vocab_begin_ + local_vocab_, store_.B(), store_.T(),
                                            config_.channels, tp_sum_);
  }
  encoder_forward(store_.acts().encoded, store_.inputs(), param_tensors_.wte, param_tensors_.wpe,
                  store_.B(), store_.T(), config_.channels);
  return absl::OkStatus();
}

absl::Status GPT::forward_blocks(int begin, int end) {
  if (absl::Status s = store_.check_blocks(begin, end, "forward_blocks"); !s.ok()) return s;
  for (int l = begin; l < end; ++l) {
    if (absl::Status s = block_forward(l); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status GPT::block_forward(int l) {
  const int B = store_.B(), T = store_.T(), C = config_.channels;
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
  if (absl::Status s = store_.check_prepared("head_forward"); !s.ok()) return s;
  if (!store_.part_head()) {
    return absl::FailedPreconditionError("GPT::head_forward: its part has no head (set_part)");
  }
  const int B = store_.B(), T = store_.T(), C = config_.channels;
  const size_t BT = static_cast<size_t>(B) * T;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens("GPT", targets, BT, config_.vocab_size, "targets"); !s.ok()) {
      return s;
    }
  }
  const Activations& a = store_.acts();
  layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual(config_.num_layers),
                    param_tensors_.lnfw, param_tensors_.lnfb, B, T, C);
  // The head is column-parallel over the vocabulary: this rank's logits are its rows of wte's.
  linear_forward(a.logits, a.lnf, param_tensors_.wte, nullptr, B, T, C, local_vocab_);
  if (targets == nullptr) {
    store_.clear_targets();
    return std::numeric_limits<float>::quiet_NaN();
  }
  store_.set_targets(targets);
  if (sliced()) {
    absl::StatusOr<float> loss = vocab_parallel_crossentropy_forward(
        a.losses, a.lse, a.logits, store_.targets(), vocab_begin_, local_vocab_, config_.vocab_size,
        B, T, tp_max_, tp_sum_);
    if (!loss.ok()) store_.clear_targets();
    return loss;
  }
  return crossentropy_forward(a.losses, a.lse, a.logits, store_.targets(), B, T, config_.vocab_size,
                              config_.padded_vocab());
}

absl::Status GPT::backward(float dloss) {
  if (absl::Status s = head_backward(dloss); !s.ok()) return s;
  if (absl::Status s = backward_blocks(0, config_.num_layers); !s.ok()) return s;
  return embed_backward();
}

absl::Status GPT::head_backward(float dloss) {
  if (!store_.have_targets()) {
    return absl::FailedPreconditionError(
        "GPT::backward: the last forward had no targets; run forward with targets first");
  }
  const int B = store_.B(), T = store_.T(), C = config_.channels, V = config_.vocab_size;
  const int Vp = config_.padded_vocab();
  if (sliced()) {
    // Its columns of the vocabulary, padding included (which the loss leaves at zero).
    const size_t n = static_cast<size_t>(B) * T * local_vocab_;
    std::fill(store_.grads().dlogits, store_.grads().dlogits + n, 0.0f);
    vocab_parallel_crossentropy_backward(store_.grads().dlogits, dloss, store_.acts().logits,
                                         store_.acts().lse, store_.targets(), vocab_begin_,
                                         local_vocab_, V, B, T);
  } else {
    crossentropy_backward(store_.grads().dlogits, dloss, store_.acts().logits, store_.acts().lse,
                          store_.targets(), B, T, V, Vp, /*accumulate=*/false);
  }
  linear_backward(store_.grads().dln, grad_tensors_.wte, nullptr, store_.grads().dlogits,
                  store_.acts().lnf, param_tensors_.wte, B, T, C, local_vocab_,
                  /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(store_.grads().dln, static_cast<size_t>(B) * T * C); !s.ok())
    return s;
  layernorm_backward(store_.grads().dresidual, grad_tensors_.lnfw, grad_tensors_.lnfb,
                     store_.grads().dln, residual(config_.num_layers), param_tensors_.lnfw,
                     store_.acts().lnf_mean, store_.acts().lnf_rstd, B, T, C,
                     /*accumulate_dinp=*/false);
  return absl::OkStatus();
}

absl::Status GPT::backward_blocks(int begin, int end, const GradientsFinal& on_final) {
  if (absl::Status s = store_.check_blocks(begin, end, "backward_blocks"); !s.ok()) return s;
  for (int l = end - 1; l >= begin; --l) {
    if (options_.recompute_activations) block_recompute(l);
    if (absl::Status s = block_backward(l, on_final); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void GPT::block_recompute(int l) {
  const int B = store_.B(), T = store_.T(), C = config_.channels;
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
  const int B = store_.B(), T = store_.T(), C = config_.channels;
  const int Cl = local_channels_, NHl = local_heads_;
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const size_t BTCl = static_cast<size_t>(B) * T * Cl;
  const GPTBlockTensors& w = param_tensors_.blocks[l];
  const GPTBlockTensors& dw = grad_tensors_.blocks[l];
  const BlockActivations a = block_activations(l);
  const ActivationGradients& d = store_.grads();
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
  if (absl::Status s = store_.check_inputs("embed_backward"); !s.ok()) return s;
  if (sliced()) {
    vocab_parallel_embedding_backward(
        grad_tensors_.wte, grad_tensors_.wpe, store_.grads().dresidual, store_.inputs(),
        vocab_begin_, vocab_begin_ + local_vocab_, store_.B(), store_.T(), config_.channels);
    return absl::OkStatus();
  }
  encoder_backward(grad_tensors_.wte, grad_tensors_.wpe, store_.grads().dresidual, store_.inputs(),
                   store_.B(), store_.T(), config_.channels);
  return absl::OkStatus();
}

absl::Status GPT::embed_backward_rows(float* rows, std::span<const int32_t> row_of, int num_rows) {
  if (sliced()) {
    return absl::FailedPreconditionError(
        "GPT::embed_backward_rows: a tensor-parallel rank holds only its rows of wte; use "
        "embed_backward");
  }
  absl::StatusOr<const int32_t*> input_rows =
      store_.input_rows(row_of, num_rows, config_.vocab_size);
  if (!input_rows.ok()) return input_rows.status();
  detail::embedding_rows_backward(rows, store_.grads().dresidual, *input_rows, store_.BT(), 0,
                                  num_rows, config_.channels);
  detail::position_backward(grad_tensors_.wpe, store_.grads().dresidual, store_.B(), store_.T(),
                            config_.channels);
  return absl::OkStatus();
}

ModelMemory GPT::memory() const {
  return {.parameters = params_.size() * sizeof(float),
          .gradients = grads_.size() * sizeof(float),
          .activations = store_.activation_bytes(),
          .activation_gradients = store_.scratch_bytes()};
}

}  // namespace troupe::nn
