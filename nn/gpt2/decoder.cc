// GPT's incremental decoder (nn/model/decoder.h): the forward of block_forward (gpt.cc) for the
// new positions only, their keys and values kept per block, attention over the cache.
#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/gpt2/gpt.h"
#include "nn/layers/decode.h"
#include "nn/layers/encoder.h"
#include "nn/layers/gelu.h"
#include "nn/layers/layernorm.h"
#include "nn/layers/residual.h"
#include "nn/model/kv_cache.h"

namespace troupe::nn {
namespace {

class GPTDecoder final : public CachedDecoder {
 public:
  GPTDecoder(const GPT& model, KVCache cache) : CachedDecoder(std::move(cache)), model_(model) {}

  absl::Status append(const int32_t* tokens, int T) override {
    const GPTConfig& config = model_.gpt_config();
    const int B = cache_.batch(), C = config.channels, NH = config.num_heads, hd = C / NH;
    const int Vp = config.padded_vocab(), p0 = cache_.length(), cap = cache_.capacity();
    if (absl::Status s = cache_.check_append("GPT::Decoder", T); !s.ok()) return s;
    const int n = B * T;
    if (absl::Status s = check_tokens("GPT::Decoder", tokens, static_cast<size_t>(n),
                                      config.vocab_size, "tokens");
        !s.ok()) {
      return s;
    }
    const size_t nC = static_cast<size_t>(n) * C;
    // x, ln, tmp, atty [n, C]; qkv [n, 3C]; fch and its GELU [n, 4C]; mean and rstd [n]; the
    // last positions, their lnf [B, C] and its mean and rstd [B]; logits [B, Vp].
    absl::StatusOr<float*> base =
        cache_.scratch(4 * nC + 3 * nC + 8 * nC + 2 * n + 2 * static_cast<size_t>(B) * C + 2 * B +
                       static_cast<size_t>(B) * Vp);
    if (!base.ok()) return base.status();
    Carver c(*base);
    float *x = c.take(nC), *ln = c.take(nC), *tmp = c.take(nC), *atty = c.take(nC);
    float *qkv = c.take(3 * nC), *fch = c.take(4 * nC), *fch_gelu = c.take(4 * nC);
    float *mean = c.take(n), *rstd = c.take(n);
    float *last = c.take(static_cast<size_t>(B) * C), *lnf = c.take(static_cast<size_t>(B) * C);
    float *lnf_mean = c.take(B), *lnf_rstd = c.take(B);
    logits_ = c.take(static_cast<size_t>(B) * Vp);

    const GPTTensors& p = model_.param_tensors();
    encoder_forward(x, tokens, p.wte, p.wpe + static_cast<size_t>(p0) * C, B, T, C);
    for (int l = 0; l < config.num_layers; ++l) {
      const GPTBlockTensors& w = p.blocks[static_cast<size_t>(l)];
      float *keys = cache_.keys(l), *values = cache_.values(l);
      layernorm_forward(ln, mean, rstd, x, w.ln1w, w.ln1b, 1, n, C);
      decode_linear_forward(qkv, ln, w.qkvw, w.qkvb, n, C, 3 * C);
      decode_cache_write(keys, qkv + C, 3 * C, hd, B, T, p0, NH, hd, cap);
      decode_cache_write(values, qkv + 2 * C, 3 * C, hd, B, T, p0, NH, hd, cap);
      decode_attention_forward(atty, qkv, 3 * C, keys, values, B, T, p0, NH, NH, hd, cap);
      decode_linear_forward(tmp, atty, w.attprojw, w.attprojb, n, C, C);
      residual_forward(x, x, tmp, nC);
      layernorm_forward(ln, mean, rstd, x, w.ln2w, w.ln2b, 1, n, C);
      decode_linear_forward(fch, ln, w.fcw, w.fcb, n, C, 4 * C);
      gelu_forward(fch_gelu, fch, 4 * nC);
      decode_linear_forward(tmp, fch_gelu, w.fcprojw, w.fcprojb, n, 4 * C, C);
      residual_forward(x, x, tmp, nC);
    }
    for (int b = 0; b < B; ++b) {
      std::memcpy(last + static_cast<size_t>(b) * C, x + (static_cast<size_t>(b) * T + T - 1) * C,
                  sizeof(float) * C);
    }
    layernorm_forward(lnf, lnf_mean, lnf_rstd, last, p.lnfw, p.lnfb, 1, B, C);
    decode_linear_forward(logits_, lnf, p.wte, nullptr, B, C, Vp);
    cache_.advance(T);
    return absl::OkStatus();
  }

 private:
  const GPT& model_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> GPT::make_decoder(int batch, int capacity) {
  const GPTTensors& p = param_tensors_;
  bool bound = p.wte != nullptr && p.wpe != nullptr && p.lnfw != nullptr && p.lnfb != nullptr;
  for (const GPTBlockTensors& w : p.blocks) {
    for (const float* t : {w.ln1w, w.ln1b, w.qkvw, w.qkvb, w.attprojw, w.attprojb, w.ln2w, w.ln2b,
                           w.fcw, w.fcb, w.fcprojw, w.fcprojb}) {
      bound = bound && t != nullptr;
    }
  }
  if (absl::Status s = check_decoder_request(
          "GPT", layout_.slice().size, store_.part_begin(), store_.part_end(), store_.part_head(),
          config_.num_layers, bound, batch, capacity, config_.max_seq_len);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<KVCache> cache = KVCache::create(config_.num_layers, batch, config_.num_heads,
                                                  config_.channels / config_.num_heads, capacity);
  if (!cache.ok()) return cache.status();
  return std::unique_ptr<Decoder>(std::make_unique<GPTDecoder>(*this, std::move(*cache)));
}

}  // namespace troupe::nn
