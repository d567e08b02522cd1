// The GPT layers of nn/layers/ on a CUDA device, fp32: the same functions, the same argument
// order and the same semantics (see each CPU header), on device pointers, enqueued on `stream`.
// Compiled only in builds with CUDA (TROUPE_HAVE_CUDA); no CPU path includes this header.
// Shapes: B = batch size, T = sequence length, C = channels, NH = heads, hs = C / NH,
// OC = output channels, V = vocabulary, Vp = padded row length of the logits.
//
// Every function returns once its work is enqueued (asynchronous, like a kernel launch). OK means
// it was launched; an error (Internal, with the CUDA or cuBLAS code) means a launch failed or an
// earlier asynchronous error surfaced. Results are read after synchronising `stream`.
// Differences from the CPU layers:
//   - the functions that run GEMMs (linear, attention) take a Cublas handle first;
//   - attention_backward takes caller-owned scratch `datt` [B, NH, T, T];
//   - crossentropy_forward writes the mean loss to a device float instead of returning it.
// Backward passes accumulate (+=), as on the CPU. Every result is the same bits run after run on
// one GPU model: no float atomics, every reduction in a fixed order, cuBLAS in pedantic fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace troupe::nn::cuda {

// A cuBLAS handle in CUBLAS_PEDANTIC_MATH mode: fp32 GEMMs in fp32 (no TF32 tensor cores, no
// reduced-precision reductions), for parity with the CPU layers. Created on the calling thread's
// current device; use it for pointers on that device, from one thread at a time.
// What the fully connected layers' products take as inputs (ModelOptions::matmul): fp32 (sgemm
// in pedantic fp32), or operands rounded to bf16 or fp16 with fp32 accumulation and output
// (cublasGemmEx on tensor cores, as torch.autocast's products). The same goes for attention's
// products; the softmax, norms and every other kernel compute in fp32.
enum class GemmInputs { kFloat32, kBFloat16, kFloat16 };

class Cublas {
 public:
  // FailedPrecondition without a usable device; Internal if cuBLAS fails to start.
  [[nodiscard]] static absl::StatusOr<Cublas> create(GemmInputs inputs = GemmInputs::kFloat32);

  Cublas(Cublas&& other) noexcept;
  Cublas& operator=(Cublas&& other) noexcept;
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  ~Cublas();

  cublasContext* handle() const { return handle_; }
  GemmInputs inputs() const { return inputs_; }
  // At least `bytes` of device scratch for rounded operands, valid for work queued on `stream`
  // after this call (grown stream-ordered; not thread-safe, as the handle is not).
  [[nodiscard]] absl::StatusOr<void*> scratch(size_t bytes, cudaStream_t stream) const;

 private:
  Cublas(cublasContext* handle, GemmInputs inputs) : handle_(handle), inputs_(inputs) {}
  cublasContext* handle_ = nullptr;
  GemmInputs inputs_ = GemmInputs::kFloat32;
  mutable void* scratch_ = nullptr;
  mutable size_t scratch_bytes_ = 0;
  mutable cudaStream_t scratch_stream_ = nullptr;
};

// --- encoder.h ---
// out[B, T, C] = wte[inp[b, t], :] + wpe[t, :].
[[nodiscard]] absl::Status encoder_forward(float* out, const int32_t* inp, const float* wte,
                                           const float* wpe, int B, int T, int C,
                                           cudaStream_t stream);
// dwte[inp[b, t], :] += dout[b, t, :] and dwpe[t, :] += sum over b, both summed in (b, t) order:
// the CPU layer's bits. A block per position; the first occurrence of a token owns its dwte row.
[[nodiscard]] absl::Status encoder_backward(float* dwte, float* dwpe, const float* dout,
                                            const int32_t* inp, int B, int T, int C,
                                            cudaStream_t stream);

// The embedding's pieces, which a vocab-parallel embedding (parallel.h) runs around its group's
// sum, and Llama's embedding (no positions) runs alone:
// out[B, T, C] = table[inp - v0] for the tokens in [v0, v1), zeros for the others' tokens.
[[nodiscard]] absl::Status embedding_rows_forward(float* out, const int32_t* inp,
                                                  const float* table, int v0, int v1, int B, int T,
                                                  int C, cudaStream_t stream);
// dtable[inp - v0] += dout for the tokens in [v0, v1), in (b, t) order as encoder_backward.
[[nodiscard]] absl::Status embedding_rows_backward(float* dtable, const float* dout,
                                                   const int32_t* inp, int v0, int v1, int B, int T,
                                                   int C, cudaStream_t stream);
// out[r, :] += rows[r % period, :] for r in [0, n): positions (period T) or a bias (period 1).
[[nodiscard]] absl::Status add_rows(float* out, const float* rows, size_t n, int period, int C,
                                    cudaStream_t stream);
// dwpe[t, :] += dout[b, t, :] summed over b in order.
[[nodiscard]] absl::Status position_backward(float* dwpe, const float* dout, int B, int T, int C,
                                             cudaStream_t stream);

// --- layernorm.h --- (a warp per position; dweight and dbias summed per column in a fixed tree)
[[nodiscard]] absl::Status layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                             const float* weight, const float* bias, int B, int T,
                                             int C, cudaStream_t stream);
[[nodiscard]] absl::Status layernorm_backward(float* dinp, float* dweight, float* dbias,
                                              const float* dout, const float* inp,
                                              const float* weight, const float* mean,
                                              const float* rstd, int B, int T, int C,
                                              cudaStream_t stream);

// --- linear.h --- (cuBLAS sgemm; the bias and dbias are kernels)
// out[B*T, OC] = inp[B*T, C] @ weight[OC, C]^T + bias[OC]; bias may be null.
[[nodiscard]] absl::Status linear_forward(const Cublas& blas, float* out, const float* inp,
                                          const float* weight, const float* bias, int B, int T,
                                          int C, int OC, cudaStream_t stream);
// dinp += dout @ weight (skipped when null), dweight += dout^T @ inp, dbias += column sums of
// dout (skipped when null).
[[nodiscard]] absl::Status linear_backward(const Cublas& blas, float* dinp, float* dweight,
                                           float* dbias, const float* dout, const float* inp,
                                           const float* weight, int B, int T, int C, int OC,
                                           cudaStream_t stream);

// --- attention.h --- (per batch row, a strided-batched GEMM over the heads on the handle's
// GemmInputs, the causal softmax as a kernel in fp32; the whole T x T scores are computed and
// the upper triangle overwritten with 0)
// inp [B, T, 3C] fused qkv; att [B, NH, T, T] saved for backward; out [B, T, C].
// REQUIRES: C % NH == 0.
[[nodiscard]] absl::Status attention_forward(const Cublas& blas, float* out, float* att,
                                             const float* inp, int B, int T, int C, int NH,
                                             cudaStream_t stream);
// dinp [B, T, 3C] += (dq, dk, dv). datt [B, NH, T, T] is scratch, overwritten.
[[nodiscard]] absl::Status attention_backward(const Cublas& blas, float* dinp, float* datt,
                                              const float* dout, const float* inp, const float* att,
                                              int B, int T, int C, int NH, cudaStream_t stream);

// --- gelu.h --- (tanh approximation, elementwise; out may alias inp)
[[nodiscard]] absl::Status gelu_forward(float* out, const float* inp, size_t N,
                                        cudaStream_t stream);
[[nodiscard]] absl::Status gelu_backward(float* dinp, const float* dout, const float* inp, size_t N,
                                         cudaStream_t stream);

// --- residual.h --- (out may alias either input; either gradient may be null)
[[nodiscard]] absl::Status residual_forward(float* out, const float* inp1, const float* inp2,
                                            size_t N, cudaStream_t stream);
[[nodiscard]] absl::Status residual_backward(float* dinp1, float* dinp2, const float* dout,
                                             size_t N, cudaStream_t stream);

// --- crossentropy.h ---
// loss (one device float) = mean over B*T of lse[b, t] - logits[b, t, targets[b, t]], summed in
// double in a fixed order; losses [B, T] may be null; lse [B, T] is saved for backward.
// REQUIRES: 0 <= targets[i] < V.
[[nodiscard]] absl::Status crossentropy_forward(float* loss, float* losses, float* lse,
                                                const float* logits, const int32_t* targets, int B,
                                                int T, int V, int Vp, cudaStream_t stream);
// dlogits[B, T, Vp] += dloss / (B*T) * (softmax - onehot(targets)) on columns [0, V).
[[nodiscard]] absl::Status crossentropy_backward(float* dlogits, float dloss, const float* logits,
                                                 const float* lse, const int32_t* targets, int B,
                                                 int T, int V, int Vp, cudaStream_t stream);
// parallel.h's vocab-parallel cross-entropy in three pieces around the group's all-reduces, on a
// rank's logits_shard [B, T, Vl], the columns [v0, v0 + Vl) of the padded vocabulary (columns
// >= V are padding; a rank may hold only padding):
//   vocab_parallel_max   maxes [B*T] = each row's largest real logit (-inf for only padding);
//                        then the group's max all-reduce of maxes;
//   vocab_parallel_sums  sums [2*B*T] = each row's sum of exp(logit - maxes), then its target's
//                        logit where this rank holds it (else 0); then the group's sum of sums;
//   vocab_parallel_loss  lse = maxes + log(sums) (lse may alias maxes), losses [B, T] (may be
//                        null) = lse - the target's logit, loss (one device float) their mean.
// REQUIRES: 0 <= targets[i] < V.
[[nodiscard]] absl::Status vocab_parallel_max(float* maxes, const float* logits_shard, int v0,
                                              int Vl, int V, int B, int T, cudaStream_t stream);
[[nodiscard]] absl::Status vocab_parallel_sums(float* sums, const float* logits_shard,
                                               const float* maxes, const int32_t* targets, int v0,
                                               int Vl, int V, int B, int T, cudaStream_t stream);
[[nodiscard]] absl::Status vocab_parallel_loss(float* loss, float* losses, float* lse,
                                               const float* maxes, const float* sums, int B, int T,
                                               cudaStream_t stream);
// dlogits_shard [B, T, Vl] += dloss / (B*T) * (softmax - onehot(targets)) on this rank's real
// columns; padding is untouched. No communication.
[[nodiscard]] absl::Status vocab_parallel_crossentropy_backward(
    float* dlogits_shard, float dloss, const float* logits_shard, const float* lse,
    const int32_t* targets, int v0, int Vl, int V, int B, int T, cudaStream_t stream);
// probs[B, T, Vp] = softmax over columns [0, V), 0 on the padding.
[[nodiscard]] absl::Status softmax_forward(float* probs, const float* logits, int B, int T, int V,
                                           int Vp, cudaStream_t stream);

// --- Llama's layers (llama_layers.cu) ---
// rmsnorm.h: out[B, T, C] = weight * (inp * rstd), rstd [B, T] saved. Backward: dinp += (always
// accumulates), dweight += (a channel's positions summed in order).
[[nodiscard]] absl::Status rmsnorm_forward(float* out, float* rstd, const float* inp,
                                           const float* weight, int B, int T, int C, float eps,
                                           cudaStream_t stream);
[[nodiscard]] absl::Status rmsnorm_backward(float* dinp, float* dweight, const float* dout,
                                            const float* inp, const float* weight,
                                            const float* rstd, int B, int T, int C,
                                            cudaStream_t stream);
// rope.h: out [B, T, 3 NH hd] packed for attention_forward (C = NH hd) from qkv [B, T, (NH + 2 KV)
// hd]; cos, sin [maxT, hd/2] on the device. Backward writes dqkv (not accumulated).
[[nodiscard]] absl::Status rope_qkv_forward(float* out, const float* qkv, const float* cos,
                                            const float* sin, int B, int T, int NH, int KV, int hd,
                                            cudaStream_t stream);
[[nodiscard]] absl::Status rope_qkv_backward(float* dqkv, const float* dout, const float* cos,
                                             const float* sin, int B, int T, int NH, int KV, int hd,
                                             cudaStream_t stream);
// swiglu.h: out [B, T, I] = silu(gate) * up from gu [B, T, 2I]; backward writes dgu.
[[nodiscard]] absl::Status swiglu_forward(float* out, const float* gu, int B, int T, int I,
                                          cudaStream_t stream);
[[nodiscard]] absl::Status swiglu_backward(float* dgu, const float* dout, const float* gu, int B,
                                           int T, int I, cudaStream_t stream);

}  // namespace troupe::nn::cuda
