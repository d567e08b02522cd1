// Softmax and cross-entropy, fused: the loss of next-token logits against int32 targets, mean over
// the B*T positions. The probabilities are never stored: the forward keeps one log-sum-exp per
// position and the backward recomputes them.
// Shapes: B = batch size, T = sequence length, V = real vocabulary, Vp = padded row length of the
// logits (Vp >= V; columns [V, Vp) are padding, ignored by the softmax, and get no gradient).
#pragma once

#include <cstdint>

namespace troupe::nn {

// Returns the mean over B*T of losses[b, t] = -log softmax(logits[b, t, :V])[targets[b, t]].
// losses [B, T] may be null; lse [B, T] receives log sum exp(logits[b, t, :V]) for backward.
// logits [B, T, Vp]; targets [B, T]. The mean is summed in a fixed order (deterministic).
// REQUIRES: 0 <= targets[i] < V.
float crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                           int B, int T, int V, int Vp);

// dlogits[B, T, Vp] += dloss / (B*T) * (softmax(logits) - onehot(targets)) on columns [0, V);
// dloss is the gradient of the objective with respect to the mean loss (1 for a plain step,
// 1 / accumulation steps when accumulating micro-batches). Columns [V, Vp) are untouched.
// With accumulate = false, dlogits = instead of +=, and columns [V, Vp) are set to 0.
void crossentropy_backward(float* dlogits, float dloss, const float* logits, const float* lse,
                           const int32_t* targets, int B, int T, int V, int Vp,
                           bool accumulate = true);

// probs[B, T, Vp] = softmax(logits[b, t, :V]) on columns [0, V) and 0 on the padding, for
// sampling and evaluation.
void softmax_forward(float* probs, const float* logits, int B, int T, int V, int Vp);

}  // namespace troupe::nn
