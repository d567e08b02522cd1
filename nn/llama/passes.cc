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
  if (absl::Status s = check_tokens("Llama", inputs, BT, config_.vocab_size, "inputs"); !s.ok())
    return s;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens("Llama", targets, BT, config_.vocab_size, "targets");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = embed_forward(inputs); !s.ok()) return s;
  if (absl::Status s = forward_blocks(0, config_.num_hidden_layers); !s.ok()) return s;
  return head_forward(targets);
}

absl::Status Llama::embed_forward(const int32_t* inputs) {
  if (absl::Status s = store_.check_prepared("embed_forward"); !s.ok()) return s;
  if (store_.part_begin() != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Llama::embed_forward: its part starts at block ", store_.part_begin()));
  }
  const size_t BT = store_.BT();
  if (absl::Status s = check_tokens("Llama", inputs, BT, config_.vocab_size, "inputs"); !s.ok())
    return s;
  store_.set_inputs(inputs);
  const float* table = param_tensors_.embed_tokens();
  if (sliced()) {
    return vocab_parallel_embedding_forward(store_.acts().encoded, store_.inputs(), table,
                                            /*wpe=*/nullptr, vocab_begin_,
                                            vocab_begin_ + local_vocab_, store_.B(), store_.T(),
                                            config_.hidden_size, tp_sum_);
  }
  embedding_forward(store_.acts().encoded, store_.inputs(), table, BT, config_.hidden_size);
  return absl::OkStatus();
}

absl::Status Llama::forward_blocks(int begin, int end) {
  if (absl::Status s = store_.check_blocks(begin, end, "forward_blocks"); !s.ok()) return s;
  for (int l = begin; l < end; ++l) {
    if (absl::Status s = block_forward(l); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Llama::project_rows(float* out, const float* in, const float* weight,
                                 int in_channels) {
  const int C = config_.hidden_size;
  if (!sliced()) {
    linear_forward(out, in, weight, nullptr, store_.B(), store_.T(), in_channels, C);
    return absl::OkStatus();
  }
  return row_parallel_linear_forward(out, in, weight, nullptr, store_.B(), store_.T(), in_channels,
                                     C, tp_sum_);
}

absl::Status Llama::block_forward(int l) {
  const int B = store_.B(), T = store_.T(), C = config_.hidden_size, hd = config_.head_dim();
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
  if (absl::Status s = store_.check_prepared("head_forward"); !s.ok()) return s;
  if (!store_.part_head()) {
    return absl::FailedPreconditionError("Llama::head_forward: its part has no head (set_part)");
  }
  const int B = store_.B(), T = store_.T(), C = config_.hidden_size;
  const size_t BT = static_cast<size_t>(B) * T;
  if (targets != nullptr) {
    if (absl::Status s = check_tokens("Llama", targets, BT, config_.vocab_size, "targets");
        !s.ok()) {
      return s;
    }
  }
  const Activations& a = store_.acts();
  rmsnorm_forward(a.lnf, a.lnf_rstd, residual(config_.num_hidden_layers), param_tensors_.norm(), B,
                  T, C, static_cast<float>(config_.rms_norm_eps));
  // The head is column-parallel over the vocabulary: this rank's logits are its rows'.
  linear_forward(a.logits, a.lnf, param_tensors_.lm_head(), nullptr, B, T, C, local_vocab_);
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

// --- Backward. ---

absl::Status Llama::backward(float dloss) {
  if (absl::Status s = head_backward(dloss); !s.ok()) return s;
  if (absl::Status s = backward_blocks(0, config_.num_hidden_layers); !s.ok()) return s;
  return embed_backward();
}

absl::Status Llama::head_backward(float dloss) {
  if (!store_.have_targets()) {
    return absl::FailedPreconditionError(
        "Llama::backward: the last forward had no targets; run forward with targets first");
  }
  const int B = store_.B(), T = store_.T(), C = config_.hidden_size, V = config_.vocab_size;
  if (sliced()) {
    // Its columns of the vocabulary, padding included (which the loss leaves at zero).
    const size_t n = static_cast<size_t>(B) * T * local_vocab_;
    std::fill(store_.grads().dlogits, store_.grads().dlogits + n, 0.0f);
    vocab_parallel_crossentropy_backward(store_.grads().dlogits, dloss, store_.acts().logits,
                                         store_.acts().lse, store_.targets(), vocab_begin_,
                                         local_vocab_, V, B, T);
  } else {
    crossentropy_backward(store_.grads().dlogits, dloss, store_.acts().logits, store_.acts().lse,
                          store_.targets(), B, T, V, config_.padded_vocab(), /*accumulate=*/false);
  }
  // A tied head's weight gradient accumulates into the embedding's.
  linear_backward(store_.grads().dln, grad_tensors_.lm_head(), nullptr, store_.grads().dlogits,
                  store_.acts().lnf, param_tensors_.lm_head(), B, T, C, local_vocab_,
                  /*accumulate_dinp=*/false);
  if (absl::Status s = sum_over_slices(store_.grads().dln, static_cast<size_t>(B) * T * C); !s.ok())
    return s;
  rmsnorm_backward(store_.grads().dresidual, grad_tensors_.norm(), store_.grads().dln,
                   residual(config_.num_hidden_layers), param_tensors_.norm(),
                   store_.acts().lnf_rstd, B, T, C, /*accumulate_dinp=*/false);
  return absl::OkStatus();
}

absl::Status Llama::backward_blocks(int begin, int end, const GradientsFinal& on_final) {
  if (absl::Status s = store_.check_blocks(begin, end, "backward_blocks"); !s.ok()) return s;
  for (int l = end - 1; l >= begin; --l) {
    if (options_.recompute_activations) block_recompute(l);
    if (absl::Status s = block_backward(l, on_final); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Llama::block_recompute(int l) {
  const int B = store_.B(), T = store_.T(), C = config_.hidden_size, hd = config_.head_dim();
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
  const int B = store_.B(), T = store_.T(), C = config_.hidden_size, hd = config_.head_dim();
  const int NH = local_heads_, KV = local_kv_heads_, I = local_mlp_;
  const int Q = NH * hd, QKV = (NH + 2 * KV) * hd;
  const size_t BTC = static_cast<size_t>(B) * T * C;
  const BlockActivations a = block_activations(l);
  const ActivationGradients& d = store_.grads();
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

absl::Status Llama::embed_backward() {
  if (absl::Status s = store_.check_inputs("embed_backward"); !s.ok()) return s;
  // One rank's rows [vocab_begin_, + local_vocab_); the whole vocabulary for one rank.
  detail::embedding_rows_backward(grad_tensors_.embed_tokens(), store_.grads().dresidual,
                                  store_.inputs(), store_.BT(), vocab_begin_,
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
  absl::StatusOr<const int32_t*> input_rows =
      store_.input_rows(row_of, num_rows, config_.vocab_size);
  if (!input_rows.ok()) return input_rows.status();
  detail::embedding_rows_backward(rows, store_.grads().dresidual, *input_rows, store_.BT(), 0,
                                  num_rows, config_.hidden_size);
  return absl::OkStatus();
}

}  // namespace troupe::nn
