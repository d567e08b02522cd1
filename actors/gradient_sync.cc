#include "actors/gradient_sync.h"

#include "absl/strings/str_cat.h"
#include "actors/allreduce_gradient_sync.h"
#include "actors/distributed_optimizer_sync.h"
#include "actors/zero_gradient_sync.h"

namespace troupe::actors {
namespace {

// dp = 1: the accumulated gradients are final as they are.
class LocalGradientSync : public GradientSync {
 public:
  LocalGradientSync(const StagePlan& plan, nn::Model& gpt, StageBuffers& buffers)
      : plan_(plan), gpt_(gpt), buffers_(buffers) {}
  nn::ParamRange owned() const override { return plan_.params; }
  float* owned_gradients() override { return buffers_.grads(plan_.params.begin); }
  absl::Status begin_step() override {
    buffers_.zero_grads();
    return absl::OkStatus();
  }
  absl::StatusOr<float> forward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                bool) override {
    return forward_stage(gpt_, plan_, inputs, targets, B, T);
  }
  absl::Status backward(float dloss, bool) override { return backward_stage(gpt_, plan_, dloss); }
  absl::Status finish(SyncTimes&) override { return absl::OkStatus(); }

 private:
  StagePlan plan_;
  nn::Model& gpt_;
  StageBuffers& buffers_;
};

}  // namespace

const char* to_string(GradientSyncKind kind) {
  switch (kind) {
    case GradientSyncKind::kAllreduce:
      return "allreduce";
    case GradientSyncKind::kZero1:
      return "ZeRO-1";
    case GradientSyncKind::kZero2:
      return "ZeRO-2";
    case GradientSyncKind::kZero3:
      return "ZeRO-3";
  }
  return "unknown";
}

nn::ModelStorage model_storage(GradientSyncKind kind, int dp) {
  const int stage = dp > 1 ? zero_stage(kind) : 0;
  return {.parameters = stage < 3, .gradients = stage < 2};
}

absl::Status check_gradient_sync(const GradientSyncOptions& options, const nn::Model& gpt) {
  const int stage = zero_stage(options.kind);
  if (stage < 0 || stage > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient sync ", stage, " is not allreduce or a ZeRO stage 1-3"));
  }
  if (stage == 0) return absl::OkStatus();
  return ZeroGradientSync::check(options, stage, gpt.layout());
}

absl::StatusOr<std::unique_ptr<GradientSync>> make_gradient_sync(
    const GradientSyncOptions& options, const StagePlan& plan, nn::Model& gpt,
    CollectiveGroup* group, StageBuffers& buffers, const ZeroBuffers& zero) {
  const int stage = zero_stage(options.kind);
  if (stage > 3 || group != nullptr) {
    if (absl::Status s = check_gradient_sync(options, gpt); !s.ok()) return s;
  }
  if (group == nullptr) return std::make_unique<LocalGradientSync>(plan, gpt, buffers);
  if (stage == 0) {
    return std::make_unique<AllreduceGradientSync>(options, plan, gpt, *group, buffers);
  }
  if (!plan.first() || !plan.last() || gpt.tensor_slice().size > 1) {
    // A pipeline stage or a tensor slice: ZeRO-1 as Megatron's distributed optimizer.
    if (stage == 1) {
      return std::make_unique<DistributedOptimizerSync>(options, plan, gpt, *group, buffers);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient sync \"", options.kind, "\" serves a whole model; stage ", plan.stage, " of ",
        plan.num_stages, " owns blocks [", plan.block_begin, ", ", plan.block_end,
        ") of tensor slice ", gpt.tensor_slice().rank, " of ", gpt.tensor_slice().size,
        " (with model parallelism: \"allreduce\" or \"zero1\")"));
  }
  return ZeroGradientSync::create(options, stage, plan, gpt, *group, zero);
}

}  // namespace troupe::actors
