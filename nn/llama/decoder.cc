// Llama's incremental decoder (nn/model/decoder.h): the forward of block_forward (passes.cc) for
// the new positions only, their keys (rotated at their absolute positions) and values kept per
// block, one copy per KV head; each query head attends over its group's.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/layers/decode.h"
#include "nn/layers/residual.h"
#include "nn/layers/rmsnorm.h"
#include "nn/layers/rope.h"
#include "nn/layers/swiglu.h"
#include "nn/llama/llama.h"
#include "nn/model/kv_cache.h"

namespace troupe::nn {

class LlamaDecoder final : public CachedDecoder {
 public:
  LlamaDecoder(const Llama& model, KVCache cache)
      : CachedDecoder(std::move(cache)), model_(model) {}

  absl::Status append(const int32_t* tokens, int T) override {
    const LlamaConfig& config = model_.config_;
    const int B = cache_.batch(), C = config.hidden_size, hd = config.head_dim();
    const int NH = config.num_attention_heads, KV = config.kv_heads(), group = NH / KV;
    const int I = config.intermediate_size, Vp = config.padded_vocab();
    const int Q = NH * hd, QKV = (NH + 2 * KV) * hd;
    const int p0 = cache_.length(), cap = cache_.capacity();
    const float eps = static_cast<float>(config.rms_norm_eps);
    if (absl::Status s = cache_.check_append("Llama::Decoder", T); !s.ok()) return s;
    const int n = B * T;
    if (absl::Status s = check_tokens("Llama::Decoder", tokens, static_cast<size_t>(n),
                                      config.vocab_size, "tokens");
        !s.ok()) {
      return s;
    }
    const size_t N = n, nC = N * C;
    // x, ln, tmp [n, C]; qkv [n, QKV]; qkvr [n, 3Q]; atty [n, Q]; gu [n, 2I]; mlp [n, I];
    // rstd [n]; the last positions and their norm [B, C], its rstd [B]; logits [B, Vp].
    absl::StatusOr<float*> base =
        cache_.scratch(3 * nC + N * (QKV + 3 * Q + Q + 3 * I + 1) + 2 * static_cast<size_t>(B) * C +
                       B + static_cast<size_t>(B) * Vp);
    if (!base.ok()) return base.status();
    Carver c(*base);
    float *x = c.take(nC), *ln = c.take(nC), *tmp = c.take(nC);
    float *qkv = c.take(N * QKV), *qkvr = c.take(N * 3 * Q), *atty = c.take(N * Q);
    float *gu = c.take(N * 2 * I), *mlp = c.take(N * I), *rstd = c.take(N);
    float *last = c.take(static_cast<size_t>(B) * C), *lnf = c.take(static_cast<size_t>(B) * C);
    float* lnf_rstd = c.take(B);
    logits_ = c.take(static_cast<size_t>(B) * Vp);

    const Llama::Tensors& p = model_.param_tensors_;
    const float* table = p.embed_tokens();
    for (int row = 0; row < n; ++row) {
      std::memcpy(x + static_cast<size_t>(row) * C, table + static_cast<size_t>(tokens[row]) * C,
                  sizeof(float) * C);
    }
    // The angles of positions [p0, p0 + T): rope_qkv_forward gives new position t row t's.
    const size_t angle0 = static_cast<size_t>(p0) * (hd / 2);
    const float* cos = model_.rope_cos_.data() + angle0;
    const float* sin = model_.rope_sin_.data() + angle0;
    for (int l = 0; l < config.num_hidden_layers; ++l) {
      auto w = [&](LlamaTensor t) { return p.block(l, t); };
      float *keys = cache_.keys(l), *values = cache_.values(l);
      rmsnorm_forward(ln, rstd, x, w(LlamaTensor::kInputNorm), 1, n, C, eps);
      decode_linear_forward(qkv, ln, w(LlamaTensor::kQ), nullptr, n, C, QKV);
      // qkvr: the rotated queries, then each query head's rotated key (its KV head's) and value.
      rope_qkv_forward(qkvr, qkv, cos, sin, B, T, NH, KV, hd);
      decode_cache_write(keys, qkvr + Q, 3 * Q, group * hd, B, T, p0, KV, hd, cap);
      decode_cache_write(values, qkv + Q + KV * hd, QKV, hd, B, T, p0, KV, hd, cap);
      decode_attention_forward(atty, qkvr, 3 * Q, keys, values, B, T, p0, NH, KV, hd, cap);
      decode_linear_forward(tmp, atty, w(LlamaTensor::kO), nullptr, n, Q, C);
      residual_forward(x, x, tmp, nC);
      rmsnorm_forward(ln, rstd, x, w(LlamaTensor::kPostNorm), 1, n, C, eps);
      decode_linear_forward(gu, ln, w(LlamaTensor::kGate), nullptr, n, C, 2 * I);
      swiglu_forward(mlp, gu, 1, n, I);
      decode_linear_forward(tmp, mlp, w(LlamaTensor::kDown), nullptr, n, I, C);
      residual_forward(x, x, tmp, nC);
    }
    for (int b = 0; b < B; ++b) {
      std::memcpy(last + static_cast<size_t>(b) * C, x + (static_cast<size_t>(b) * T + T - 1) * C,
                  sizeof(float) * C);
    }
    rmsnorm_forward(lnf, lnf_rstd, last, p.norm(), 1, B, C, eps);
    decode_linear_forward(logits_, lnf, p.lm_head(), nullptr, B, C, Vp);
    cache_.advance(T);
    return absl::OkStatus();
  }

 private:
  const Llama& model_;
};

absl::StatusOr<std::unique_ptr<Decoder>> Llama::make_decoder(int batch, int capacity) {
  const bool bound = std::all_of(param_tensors_.at.begin(), param_tensors_.at.end(),
                                 [](const float* t) { return t != nullptr; });
  if (absl::Status s =
          check_decoder_request("Llama", layout().slice().size, store_.part_begin(),
                                store_.part_end(), store_.part_head(), config_.num_hidden_layers,
                                bound, batch, capacity, config_.max_position_embeddings);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<KVCache> cache = KVCache::create(config_.num_hidden_layers, batch,
                                                  config_.kv_heads(), config_.head_dim(), capacity);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<Decoder>(std::make_unique<LlamaDecoder>(*this, std::move(*cache)));
}

}  // namespace troupe::nn
