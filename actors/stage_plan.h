// What one pipeline stage owns of the model: a range of its blocks, and with
// them a range of the flat parameter buffer (nn/model/layout.h).
//
// The blocks are split to balance the parameters the stages own (DeepSpeed's
// partition_method "parameters"; balanced_partition), or as the user gives
// them (parallel.partition; Megatron's even split is uniform_partition). The
// parameter ranges of the stages tile the buffer, so that each parameter has
// one owner:
//   first stage   [0, block_begin(end))            the embedding, its blocks
//   middle stage  [block_begin(begin), block_begin(end))
//   last stage    [block_begin(begin), num_params) its blocks and the head
// (with pp = 1 one stage owns [0, num_params)). A head tied to the token
// embedding: the last stage of a pipeline computes with a copy of it that the
// first stage owns, whose gradient it sends to the first stage to be added
// before the exchange (Megatron's embedding group).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/model/layout.h"
#include "nn/model/model.h"
#include "nn/optim/param_range.h"

namespace troupe::actors {

struct StagePlan {
  int stage = 0;        // p
  int num_stages = 1;   // pp
  int block_begin = 0;  // the stage's blocks [block_begin, block_end)
  int block_end = 0;
  nn::ParamRange params;  // the range of the flat buffer it owns (above)

  bool first() const { return stage == 0; }
  bool last() const { return stage + 1 == num_stages; }
};

// The plan of stage p of pp for a model laid out as `layout`: the blocks
// balanced by parameter count (balanced_partition), or `partition[i]` blocks
// to stage i when given (parallel.partition). InvalidArgument unless
// 1 <= pp <= L and 0 <= p < pp, and a partition has pp positive counts
// summing to L.
absl::StatusOr<StagePlan> plan_stage(const nn::ModelLayout& layout, int pp, int p,
                                     std::span<const int64_t> partition = {});

// The blocks of each of `stages` stages, contiguous and at least one each,
// that balance the parameters the stages own: the first stage's count holds
// the embedding, the last's the head, and the largest stage's is
// as small as it can be. Of the partitions that reach it, the even split
// when it is one (so that a model whose embeddings are small splits as
// Megatron splits it), else the one giving the earlier stages the most
// blocks. REQUIRES: 1 <= stages <= L.
std::vector<int64_t> balanced_partition(const nn::ModelLayout& layout, int stages);
// Megatron's even split of `blocks` over `stages`: the first blocks mod
// stages stages take one more. REQUIRES: 1 <= stages <= blocks.
std::vector<int64_t> uniform_partition(int blocks, int stages);

// The stage's part of the model's forward on one micro-batch [B, T]: the
// embedding on the first stage, the plan's blocks, the head and loss on the
// last (the loss is NaN on the others). A stage that is not the first reads
// its input activation from gpt.residual(block_begin), which its schedule
// wrote there after prepare(B, T); targets are read only by the last.
// For a whole model (pp = 1) this is gpt.forward, piece by piece.
//
// `go_on`, when given, is asked before each block: a step that cannot
// succeed any more (its group lost a member) stops there with its error,
// instead of computing to the end for nothing.
using GoOn = std::function<absl::Status()>;
absl::StatusOr<float> forward_stage(nn::Model& gpt, const StagePlan& plan, const int32_t* inputs,
                                    const int32_t* targets, int B, int T,
                                    const GoOn& go_on = nullptr);
// The matching backward, accumulating the stage's parameter gradients: the
// head on the last stage (else the schedule wrote the gradient for
// residual(block_end) into gpt.dresidual()), the plan's blocks (reporting
// each finished run to on_final, as Model::backward_blocks does), the
// embedding on the first stage. For pp = 1 this is gpt.backward(dloss).
absl::Status backward_stage(nn::Model& gpt, const StagePlan& plan, float dloss,
                            const nn::Model::GradientsFinal& on_final = nullptr,
                            const GoOn& go_on = nullptr);

}  // namespace troupe::actors
