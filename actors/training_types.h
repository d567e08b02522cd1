// What the controller, the stages and the shards of a training job say to each
// other: the model and optimizer they build, a step's request and report, a
// commit. All codable (core/codec.h), so the controller may run in another
// process than the actors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codec.h"
#include "nn/gpt_param_layout.h"
#include "nn/optim/adamw.h"
#include "nn/optim/sgd.h"

namespace troupe::actors {

// The GPT every replica builds (nn::GPTConfig, plus how it runs).
struct ModelSpec {
  int n_layer = 0;
  int n_head = 0;
  int n_embd = 0;
  int seq_len = 0;
  int vocab_size = 0;
  int padded_vocab_size = 0;
  bool recompute_activations = false;
  nn::GPTConfig gpt() const;
  TROUPE_FIELDS(n_layer, n_head, n_embd, seq_len, vocab_size, padded_vocab_size,
                recompute_activations);
};

// The precision of the compute copies of the weights. The masters are fp32;
// bf16 and fp16 round the copies a stage computes with (on CPU the kernels
// then compute in fp32 on those values).
enum class Precision : int32_t { kFp32 = 0, kBf16 = 1, kFp16 = 2 };

struct OptimizerSpec {
  enum Kind : int32_t { kAdamW = 0, kSgd = 1 };
  int32_t kind = kAdamW;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  bool nesterov = false;
  nn::AdamWConfig adamw(float lr) const;
  nn::SgdConfig sgd(float lr) const;
  TROUPE_FIELDS(kind, beta1, beta2, eps, weight_decay, momentum, dampening, nesterov);
};

// Asks every stage for step `step` (1-based): run its micro-batches forward
// and backward, with the loss multiplied by `loss_scale`, and reduce the
// gradients. Nothing is applied until commit.
struct StepRequest {
  int64_t step = 0;
  float loss_scale = 1.0f;
  TROUPE_FIELDS(step, loss_scale);
};

// What a stage did in a step. Timings in milliseconds.
struct StepReport {
  int64_t step = 0;
  double loss = 0;          // mean over this replica's micro-batches (unscaled)
  double grad_norm_sq = 0;  // of the reduced gradients, still multiplied by loss_scale
  bool found_inf = false;   // a reduced gradient is inf or NaN
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t data_position = 0;  // the loader's global position after the step
  int64_t epoch = 0;
  double forward_ms = 0;
  double backward_ms = 0;
  double comm_ms = 0;          // issue to completion of every bucket's allreduce, summed
  double comm_exposed_ms = 0;  // in allreduce calls during backward, and waiting after it
  double step_ms = 0;
  TROUPE_FIELDS(step, loss, grad_norm_sq, found_inf, samples, tokens, data_position, epoch,
                forward_ms, backward_ms, comm_ms, comm_exposed_ms, step_ms);
};

// Applies step `step`: params -= update(lr, grads * grad_scale). grad_scale
// folds in 1 / loss_scale and the clipping coefficient.
struct CommitRequest {
  int64_t step = 0;
  float lr = 0;
  float grad_scale = 1.0f;
  TROUPE_FIELDS(step, lr, grad_scale);
};

}  // namespace troupe::actors
