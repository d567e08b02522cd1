// PipelineStageActor: the layers of one pipeline stage of one replica, with
// their activations and gradients (DESIGN.md s5). So far a stage holds the
// whole model (pp = 1, tp = 1) and the data-parallel gradient reduction.
//
// A step, as the controller drives it:
//   run_step(k)   for each of its micro-batches: take it from the loader of
//                 this coordinate, forward, backward; the last micro-batch's
//                 backward issues each gradient bucket's allreduce (average
//                 over dp) as soon as backward has finished it, overlapping
//                 the rest of backward; waits for them; reports loss and norm.
//   commit        by the parameter shard of this coordinate (in this process),
//                 only once every stage's run_step succeeded; or
//   discard(k)    drops the step's gradients (a failed or overflowed step).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/data/addition_task.h"
#include "actors/gradient_buckets.h"
#include "actors/mesh.h"
#include "actors/stage_tensors.h"
#include "actors/training_types.h"
#include "core/actor.h"
#include "core/cluster/collective_group.h"
#include "nn/gpt.h"

namespace troupe::actors {

class DataLoader;

struct StageOptions {
  std::string job;
  Coordinate at;
  Mesh mesh;
  ModelSpec model;
  int micro_batch = 1;
  int grad_accum = 1;
  int64_t bucket_elements = 500000000;  // reduce_bucket_size
  bool overlap_comm = true;
  int threads = 0;        // compute threads; 0: leave the process's setting
  std::string group;      // the data-parallel collective group (declared by the controller)
  std::string transport;  // for the group: "ucx", "tcp"; empty: the first that starts
  // kFp16: the reduced gradients are rounded to fp16, as fp16 gradients
  // are, so that a loss scale too large for fp16 overflows (to inf) as it
  // would on a GPU and the step is skipped.
  Precision precision = Precision::kFp32;
  TROUPE_FIELDS(job, at, mesh, model, micro_batch, grad_accum, bucket_elements, overlap_comm,
                threads, group, transport, precision);
};

// Greedy decoding of held-out problems of a synthetic task.
struct EvalRequest {
  AdditionTaskOptions task;
  int samples = 100;
  TROUPE_FIELDS(task, samples);
};

struct EvalReport {
  int correct = 0;
  int total = 0;
  std::vector<std::string> examples;  // a few "prompt -> generated (expected)" lines
  TROUPE_FIELDS(correct, total, examples);
};

class PipelineStageActor {
 public:
  // Builds the model (parameters zero until the shard's init). Throws
  // std::invalid_argument for a model or batch that cannot run.
  explicit PipelineStageActor(StageOptions options);
  ~PipelineStageActor();

  // Joins the data-parallel group (every stage of the group must call it;
  // it waits for the others) and finds this coordinate's loader.
  absl::Status setup();
  // Runs step `request.step` (see above). The reduced gradients stay until
  // commit or discard. Errors: FailedPrecondition before setup; Aborted when
  // a member of the group was lost; the loader's errors.
  absl::StatusOr<StepReport> run_step(StepRequest request);
  // Zeroes the gradients of an uncommitted step.
  absl::Status discard(int64_t step);
  absl::StatusOr<EvalReport> evaluate(EvalRequest request);
  // Greedy (temperature 0) or sampled continuation of `prompt`.
  absl::StatusOr<std::vector<int32_t>> generate(std::vector<int32_t> prompt, int max_new_tokens,
                                                float temperature, uint64_t seed);

 private:
  // Data parallelism reduces wte's gradient (tied: the LM head's and the
  // embedding's) in two shares. The head's share is dense and final after
  // head_backward, so it goes first, under all of backward. The embedding's
  // touches only the rows of the micro-batch's tokens: it goes into rows_,
  // one row per token that any replica's last micro-batch holds (the union
  // of their token masks, max-reduced during forward), is reduced last (the
  // only reduction nothing is left to hide behind) and added back into wte.

  // Issues the max-allreduce of the token mask of `inputs` into token_mask_.
  transport::Work issue_token_mask(const std::vector<int32_t>& inputs);
  // The last micro-batch's backward, piece by piece, issuing ready buckets.
  absl::Status backward_with_buckets(float dloss, transport::Work& token_mask,
                                     std::vector<transport::Work>& pending,
                                     std::vector<double>& issued_at);
  void issue(const std::vector<size_t>& ready, std::vector<transport::Work>& pending,
             std::vector<double>& issued_at);
  void issue_range(float* data, size_t count, std::vector<transport::Work>& pending,
                   std::vector<double>& issued_at);
  // wte's gradient += the reduced rows_ (after every reduction finished).
  void add_embedding_rows();

  StageOptions options_;
  std::string name_;
  std::optional<nn::GPT> model_;
  std::shared_ptr<StageTensors> tensors_;
  std::optional<GradientBuckets> buckets_;
  std::unique_ptr<CollectiveGroup> group_;
  std::shared_ptr<DataLoader> loader_;
  double issue_ms_ = 0;               // this step's time spent inside allreduce_async calls
  std::vector<uint16_t> half_grads_;  // fp16: the gradients' rounding scratch
  std::vector<float> token_mask_;     // [V]: 1 for the tokens of the last micro-batch(es)
  std::vector<int32_t> row_of_;       // [V]: token -> its row of rows_, or -1
  std::vector<int32_t> row_tokens_;   // row of rows_ -> token, ascending
  std::vector<float> rows_;           // [rows, C]: the embedding's share of wte's gradient
};
TROUPE_ACTOR(PipelineStageActor, &PipelineStageActor::setup, &PipelineStageActor::run_step,
             &PipelineStageActor::discard, &PipelineStageActor::evaluate,
             &PipelineStageActor::generate);

}  // namespace troupe::actors
