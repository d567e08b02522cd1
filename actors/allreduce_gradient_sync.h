// DDP's gradient exchange: the stage's gradients averaged over the
// data-parallel group by allreduce, in buckets of whole layers issued as
// backward finishes them (actors/gradient_buckets.h), so that communication
// overlaps the rest of backward. Every rank owns the whole stage.
//
// The token embedding's gradient is reduced in two shares. The dense one (a
// tied LM head's, and earlier micro-batches' whole gradients) is final after
// head_backward, so it goes first, under all of backward. The embedding's own
// touches only the rows of the micro-batch's tokens: it goes into rows_, one
// row per token that any replica's last micro-batch holds (the union of their
// token masks, max-reduced during forward), is reduced last (the only
// reduction nothing is left to hide behind) and added back.
//
// A pipeline stage's plan (pp > 1) is reduced after its last backward, in
// buckets of bucket_elements over its range: with a tied head the first
// stage's embedding gradient is whole only once the last stage's share was
// added to it, which the stage does before that backward
// (docs/parallelism.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "actors/gradient_buckets.h"
#include "actors/gradient_sync.h"
#include "actors/pending_reductions.h"
#include "actors/stage_plan.h"
#include "transport/collectives/work.h"

namespace troupe::actors {

class AllreduceGradientSync : public GradientSync {
 public:
  AllreduceGradientSync(const GradientSyncOptions& options, const StagePlan& plan, nn::Model& model,
                        CollectiveGroup& group, StageBuffers& buffers);
  ~AllreduceGradientSync() override { drain(); }

  nn::ParamRange owned() const override { return plan_.params; }
  float* owned_gradients() override { return buffers_.grads(plan_.params.begin); }
  absl::Status begin_step() override;
  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                bool last) override;
  absl::Status backward(float dloss, bool last) override;
  absl::Status finish(SyncTimes& times) override;
  void drain() override;

 private:
  // The last micro-batch's token mask, reduced while its forward runs.
  void reduce_token_mask(std::span<const int32_t> inputs);
  absl::Status issue_backward(nn::Model& model, float dloss);
  // issue_backward on a GPU: the blocks' buckets as backward finishes them, the embedding's
  // whole gradient at the end.
  absl::Status issue_backward_dense(nn::Model& model, float dloss);
  // The stage is the whole model, the token embedding's rows whole too: its
  // gradient is reduced on its own and the rest as backward finishes it. On
  // the CPU the embedding's share is the rows a batch touched; on a GPU (no
  // embed_backward_rows there yet) the whole table, after embed_backward.
  // Else everything is reduced after the last backward, in buckets.
  bool whole_model() const {
    return plan_.first() && plan_.last() && model_.tensor_slice().size == 1;
  }
  bool sparse_embedding() const { return whole_model() && model_.device().is_cpu(); }
  void issue(const std::vector<size_t>& ready);
  void issue_range(float* data, size_t count);
  // The token embedding's gradient += the reduced rows_ (after every
  // reduction finished).
  void add_embedding_rows();
  // Whether the step can still succeed: the group's failure once it lost a
  // member (forward and backward stop there).
  GoOn go_on() const;

  GradientSyncOptions options_;
  StagePlan plan_;
  nn::Model& model_;
  CollectiveGroup& group_;
  StageBuffers& buffers_;
  GradientBuckets buckets_;
  // This step's reductions, and the time spent issuing them.
  PendingReductions pending_;
  double issue_ms_ = 0;
  double backward_done_ms_ = 0;
  transport::Work token_mask_work_ = transport::Work::done_with(absl::OkStatus());
  std::vector<float> token_mask_;    // [V]: 1 for the tokens of the last micro-batch(es)
  std::vector<int32_t> row_of_;      // [V]: token -> its row of rows_, or -1
  std::vector<int32_t> row_tokens_;  // row of rows_ -> token, ascending
  std::vector<float> rows_;          // [rows, C]: the embedding's share of its gradient
};

}  // namespace troupe::actors
