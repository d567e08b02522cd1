// Tensor-parallel layers, Megatron-style: each of tp ranks holds a slice of a weight and calls a
// sum (or max) all-reduce over its tensor-parallel group where the math needs the whole.
// Activations entering and leaving these layers are replicated across the group unless named
// "_shard". Shapes: B = batch size, T = sequence length, C = channels, OC = output channels;
// an "l" suffix (OCl, Cl, Vl) is this rank's local slice width.
//
// The collectives are callbacks so that this layer needs no transport: each must reduce the
// `count` floats at `data` element-wise across the group, in place, and return only when every
// rank holds the result. The layers call them in the same order on every rank. A collective that
// fails (an aborted group, a lost rank) returns its error; the layer stops there and returns it,
// its outputs then unspecified.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::nn {

using AllReduceFn = std::function<absl::Status(float* data, size_t count)>;

// --- Column-parallel linear: weight [OC, C] split by output rows. ---
// This rank holds weight_shard [OCl, C] and bias_shard [OCl] (rows [o0, o0 + OCl) of weight and
// bias; bias_shard may be null) and computes its output slice:
//   out_shard[B*T, OCl] = inp[B*T, C] @ weight_shard^T + bias_shard.   No communication.
void column_parallel_linear_forward(float* out_shard, const float* inp, const float* weight_shard,
                                    const float* bias_shard, int B, int T, int C, int OCl);

// Accumulates dweight_shard [OCl, C] and dbias_shard [OCl] (may be null) locally, and
//   dinp[B*T, C] += allreduce_sum(dout_shard @ weight_shard)
// through dinp_partial [B*T, C], caller-owned scratch (overwritten). dinp may be null: then
// neither the scratch nor the callback is used (every rank must agree on that).
[[nodiscard]] absl::Status column_parallel_linear_backward(
    float* dinp, float* dinp_partial, float* dweight_shard, float* dbias_shard,
    const float* dout_shard, const float* inp, const float* weight_shard, int B, int T, int C,
    int OCl, const AllReduceFn& allreduce_sum);

// --- Row-parallel linear: weight [OC, C] split by input columns. ---
// This rank holds weight_shard [OC, Cl] (columns [c0, c0 + Cl) of weight) and the input slice
// inp_shard [B*T, Cl]; bias [OC] is replicated (may be null):
//   out[B*T, OC] = allreduce_sum(inp_shard @ weight_shard^T) + bias.
[[nodiscard]] absl::Status row_parallel_linear_forward(float* out, const float* inp_shard,
                                                       const float* weight_shard, const float* bias,
                                                       int B, int T, int Cl, int OC,
                                                       const AllReduceFn& allreduce_sum);

// Accumulates dinp_shard [B*T, Cl] (may be null), dweight_shard [OC, Cl], and dbias [OC] (may be
// null; every rank computes the whole, identical, bias gradient). No communication.
void row_parallel_linear_backward(float* dinp_shard, float* dweight_shard, float* dbias,
                                  const float* dout, const float* inp_shard,
                                  const float* weight_shard, int B, int T, int Cl, int OC);

// --- Vocab-parallel embedding: wte [V, C] split by rows. ---
// This rank holds wte_shard [v1 - v0, C] (rows [v0, v1) of wte); wpe [maxT, C] is replicated and
// may be null (token embedding only). Tokens outside [v0, v1) contribute zeros here:
//   out[B, T, C] = allreduce_sum(wte_shard[inp - v0] or 0) + wpe[t].
[[nodiscard]] absl::Status vocab_parallel_embedding_forward(float* out, const int32_t* inp,
                                                            const float* wte_shard,
                                                            const float* wpe, int v0, int v1, int B,
                                                            int T, int C,
                                                            const AllReduceFn& allreduce_sum);

// dwte_shard[inp - v0] += dout for the tokens in [v0, v1); dwpe (may be null) += sum over b of
// dout, the whole replicated gradient on every rank. No communication.
void vocab_parallel_embedding_backward(float* dwte_shard, float* dwpe, const float* dout,
                                       const int32_t* inp, int v0, int v1, int B, int T, int C);

// --- Vocab-parallel cross-entropy: logits [B, T, Vp] split by columns. ---
// This rank holds logits_shard [B, T, Vl], the columns [v0, v0 + Vl) of the padded vocabulary;
// columns >= V are padding (a rank may hold only padding). The row max is combined with
// allreduce_max, the sum of exponentials and the target logit with one allreduce_sum of 2*B*T
// floats. Returns the mean loss over B*T positions (the same on every rank), or a collective's
// error; losses [B, T] may be null; lse [B, T] receives the global log-sum-exp for backward.
// REQUIRES: 0 <= targets[i] < V.
[[nodiscard]] absl::StatusOr<float> vocab_parallel_crossentropy_forward(
    float* losses, float* lse, const float* logits_shard, const int32_t* targets, int v0, int Vl,
    int V, int B, int T, const AllReduceFn& allreduce_max, const AllReduceFn& allreduce_sum);

// dlogits_shard[B, T, Vl] += dloss / (B*T) * (softmax - onehot(targets)) on this rank's real
// columns; padding columns are untouched. No communication.
void vocab_parallel_crossentropy_backward(float* dlogits_shard, float dloss,
                                          const float* logits_shard, const float* lse,
                                          const int32_t* targets, int v0, int Vl, int V, int B,
                                          int T);

}  // namespace troupe::nn
