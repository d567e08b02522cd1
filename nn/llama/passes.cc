// The Llama model's forward and backward passes, piece by piece (nn/model/model.h): the
// embedding, the blocks, the head, and their backwards.
#include <algorithm>
#include <cstring>
#include <limits>

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
#include "nn/llama/llama.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

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

// out[B*T, C] = table[inp] (rows of the whole vocabulary).
void embedding_forward(float* out, const int32_t* inp, const float* table, size_t BT, int C) {
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (size_t row = 0; row < BT; row++) {
    std::memcpy(out + row * C, table + static_cast<size_t>(inp[row]) * C, sizeof(float) * C);
  }
}

}  // namespace

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

}  // namespace troupe::nn
