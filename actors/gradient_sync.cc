#include "actors/gradient_sync.h"

#include "absl/strings/str_cat.h"
#include "actors/allreduce_gradient_sync.h"

namespace troupe::actors {
namespace {

// dp = 1: the accumulated gradients are final as they are.
class LocalGradientSync : public GradientSync {
 public:
  explicit LocalGradientSync(const StagePlan& plan) : plan_(plan) {}
  nn::ParamRange owned() const override { return plan_.params; }
  absl::Status before_last_forward(std::span<const int32_t>) override { return absl::OkStatus(); }
  absl::Status last_backward(nn::GPT& gpt, float dloss) override {
    return backward_stage(gpt, plan_, dloss);
  }
  absl::Status finish(SyncTimes&) override { return absl::OkStatus(); }

 private:
  StagePlan plan_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GradientSync>> make_gradient_sync(const GradientSyncOptions& options,
                                                                 const StagePlan& plan,
                                                                 nn::GPT& gpt,
                                                                 CollectiveGroup* group) {
  if (options.kind != "allreduce") {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient sync \"", options.kind, "\" is not known (known: \"allreduce\")"));
  }
  if (!plan.first() || !plan.last()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient sync \"", options.kind, "\" serves a whole model; stage ", plan.stage, " of ",
        plan.num_stages, " owns blocks [", plan.block_begin, ", ", plan.block_end, ")"));
  }
  if (group == nullptr) return std::make_unique<LocalGradientSync>(plan);
  return std::make_unique<AllreduceGradientSync>(options, plan, gpt, *group);
}

}  // namespace troupe::actors
