#include "actors/pipeline_stage_actor.h"

#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "actors/data/byte_tokenizer.h"
#include "actors/data/data_loader.h"
#include "actors/generation.h"
#include "actors/handoff.h"
#include "nn/optim/clip.h"
#include "nn/threads.h"

namespace troupe::actors {
namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status check_options(const StageOptions& o) {
  const std::string where = absl::StrCat("stage ", to_string(o.at));
  if (o.micro_batch < 1 || o.grad_accum < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": micro_batch ", o.micro_batch, " and grad_accum ", o.grad_accum, " must be >= 1"));
  }
  if (o.mesh.dp < 1 || o.mesh.pp < 1 || o.mesh.tp < 1 || !contains(o.mesh, o.at)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not in the mesh dp ", o.mesh.dp,
                                                   " x pp ", o.mesh.pp, " x tp ", o.mesh.tp));
  }
  if (o.mesh.pp != 1 || o.mesh.tp != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": pipeline and tensor parallelism (pp ", o.mesh.pp, ", tp ", o.mesh.tp,
                     ") are not implemented yet; only pp = tp = 1 runs"));
  }
  if (o.precision != nn::DType::kFloat32 && o.precision != nn::DType::kBFloat16 &&
      o.precision != nn::DType::kFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": precision ", static_cast<int>(o.precision), " is not fp32, fp16 or bf16"));
  }
  if (o.gradient_sync != "allreduce") {
    return absl::InvalidArgumentError(absl::StrCat(where, ": gradient sync \"", o.gradient_sync,
                                                   "\" is not known (known: \"allreduce\")"));
  }
  return absl::OkStatus();
}

GradientSyncOptions sync_options(const StageOptions& o) {
  return {.kind = o.gradient_sync,
          .bucket_elements = o.bucket_elements,
          .overlap_comm = o.overlap_comm};
}

}  // namespace

absl::StatusOr<std::unique_ptr<PipelineStageActor>> PipelineStageActor::create(
    const StageOptions& options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  absl::StatusOr<nn::GPT> model = nn::GPT::create(options.model, options.model_options);
  if (!model.ok()) return model.status();
  absl::StatusOr<StagePlan> plan = plan_stage(model->param_layout(), options.mesh.pp, options.at.p);
  if (!plan.ok()) return plan.status();
  std::unique_ptr<PipelineStageActor> stage(
      new PipelineStageActor(options, *plan, *std::move(model)));
  // The sync is made now (with the group joined in setup) so that a kind or
  // plan it cannot serve fails the spawn rather than the first step.
  if (options.mesh.dp == 1) {
    absl::StatusOr<std::unique_ptr<GradientSync>> sync =
        make_gradient_sync(sync_options(options), stage->plan_, stage->model_, nullptr);
    if (!sync.ok()) return sync.status();
    stage->sync_ = *std::move(sync);
  }
  return stage;
}

PipelineStageActor::PipelineStageActor(StageOptions options, StagePlan plan, nn::GPT model)
    : options_(std::move(options)),
      name_(actor_name(options_.job, "stage", options_.at)),
      plan_(plan),
      model_(std::move(model)) {
  if (options_.threads > 0) nn::set_num_threads(options_.threads);
  tensors_ = std::make_shared<StageTensors>();
  tensors_->params = model_.params();
  tensors_->grads = model_.grads();
  tensors_->n = model_.num_params();
  Handoff::publish(name_, tensors_);
}

PipelineStageActor::~PipelineStageActor() {
  sync_.reset();  // before the group its reductions run on
  Handoff::retract(name_, tensors_.get());
}

absl::Status PipelineStageActor::setup() {
  std::string loader_name = actor_name(options_.job, "loader", options_.at);
  loader_ = Handoff::find<DataLoader>(loader_name);
  if (loader_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": its data loader ", loader_name, " is not in this process"));
  }
  if (options_.mesh.dp > 1 && group_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CollectiveGroup>> group = CollectiveGroup::join(options_.group);
    if (!group.ok()) return group.status();
    absl::StatusOr<std::unique_ptr<GradientSync>> sync =
        make_gradient_sync(sync_options(options_), plan_, model_, group->get());
    if (!sync.ok()) return sync.status();
    group_ = *std::move(group);
    sync_ = *std::move(sync);
  }
  return absl::OkStatus();
}

absl::Status PipelineStageActor::check_turn(int64_t step) const {
  const int64_t held = tensors_->held_step.load();
  const int64_t applied = tensors_->applied_step.load();
  if (held != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": run_step for step ", step, " while step ", held,
                     " is in flight (commit or discard it first)"));
  }
  const bool next = step == last_run_ + 1;
  const bool again = step == last_run_ && applied < step;
  if (!next && !again) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": run_step for step ", step, ", but the last step run was ", last_run_,
                     " and the last applied ", applied, ": the next step is ", last_run_ + 1,
                     applied < last_run_ ? absl::StrCat(" (or ", last_run_, " again)") : ""));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepReport> PipelineStageActor::run_step(StepRequest request) {
  if (loader_ == nullptr || sync_ == nullptr) {
    return absl::FailedPreconditionError(name_ + ": run_step before setup");
  }
  if (absl::Status s = check_turn(request.step); !s.ok()) return s;
  last_run_ = request.step;
  absl::StatusOr<StepReport> report = run_micro_batches(request);
  if (!report.ok()) {
    absl::Status failed(report.status().code(),
                        absl::StrCat(name_, ": ", report.status().message()));
    // The rest of the group may be waiting in this step's reductions for
    // this rank's share: they fail now rather than at their timeout.
    if (group_ != nullptr && !absl::IsAborted(failed))
      group_->abort(absl::AbortedError(failed.message()));
    return failed;
  }
  tensors_->held_step.store(request.step);
  return report;
}

absl::StatusOr<StepReport> PipelineStageActor::run_micro_batches(const StepRequest& request) {
  nn::GPT& gpt = model_;
  const double start = now_ms();
  StepReport report;
  report.step = request.step;
  report.at = options_.at;
  report.holds_loss = plan_.last();
  report.slice_params = static_cast<int64_t>(gpt.num_params());
  sync_->drain();  // nothing of a failed step may still write the gradients
  gpt.zero_grad();
  const int B = options_.micro_batch;
  const int T = options_.model.max_seq_len;
  double loss_sum = 0;
  for (int j = 0; j < options_.grad_accum; ++j) {
    absl::StatusOr<Batch> batch = loader_->next();
    if (!batch.ok()) return batch.status();
    if (batch->inputs.size() != static_cast<size_t>(B) * T) {
      return absl::InternalError(absl::StrCat(name_, ": the loader gave ", batch->inputs.size(),
                                              " tokens for a micro-batch of ", B, " x ", T));
    }
    report.data_position = batch->position + static_cast<int64_t>(B) * options_.mesh.dp;
    report.epoch = batch->epoch;
    const bool last = j + 1 == options_.grad_accum;
    if (last) {
      if (absl::Status s = sync_->before_last_forward(batch->inputs); !s.ok()) return s;
    }
    const double t0 = now_ms();
    absl::StatusOr<float> loss =
        forward_stage(gpt, plan_, batch->inputs.data(), batch->targets.data(), B, T);
    if (!loss.ok()) return loss.status();
    if (plan_.last()) loss_sum += *loss;
    const double t1 = now_ms();
    report.forward_ms += t1 - t0;
    // Each micro-batch's mean loss weighs 1 / grad_accum; the loss scale
    // rides on the same factor.
    const float dloss = request.loss_scale / static_cast<float>(options_.grad_accum);
    absl::Status backward =
        last ? sync_->last_backward(gpt, dloss) : backward_stage(gpt, plan_, dloss);
    if (!backward.ok()) return backward;
    report.backward_ms += now_ms() - t1;
  }
  SyncTimes times;
  if (absl::Status s = sync_->finish(times); !s.ok()) return s;
  report.comm_ms = times.comm_ms;
  report.comm_exposed_ms = times.exposed_ms;
  report.owned = sync_->owned();
  float* owned_grads = gpt.grads() + report.owned.begin;
  const auto n = static_cast<int64_t>(report.owned.size());
  if (options_.precision == nn::DType::kFloat16) {
    // fp16 gradients: values beyond 65504 become inf, as they would there.
    half_grads_.resize(report.owned.size());
    nn::convert(owned_grads, nn::DType::kFloat32, half_grads_.data(), nn::DType::kFloat16, n);
    nn::convert(half_grads_.data(), nn::DType::kFloat16, owned_grads, nn::DType::kFloat32, n);
  }
  report.loss = plan_.last() ? loss_sum / options_.grad_accum : 0;
  report.grad_norm_sq = nn::grad_norm_squared(owned_grads, report.owned.size());
  report.found_inf = !std::isfinite(report.grad_norm_sq);
  report.samples = static_cast<int64_t>(B) * options_.grad_accum;
  report.tokens = report.samples * T;
  report.step_ms = now_ms() - start;
  return report;
}

absl::Status PipelineStageActor::discard(int64_t step) {
  const int64_t held = tensors_->held_step.load();
  const int64_t applied = tensors_->applied_step.load();
  if (step != last_run_ || step <= applied || (held != 0 && held != step)) {
    return absl::FailedPreconditionError(absl::StrCat(
        name_, ": discard of step ", step, ", but the last step run was ", last_run_,
        held != 0 ? absl::StrCat(" (its gradients held)") : "", " and the last applied ", applied));
  }
  if (sync_ != nullptr) sync_->drain();
  model_.zero_grad();
  tensors_->held_step.store(0);
  return absl::OkStatus();
}

absl::StatusOr<EvalReport> PipelineStageActor::evaluate(EvalRequest request) {
  absl::StatusOr<std::vector<AdditionProblem>> problems =
      held_out_problems(request.task, request.samples);
  if (!problems.ok()) return problems.status();
  EvalReport report;
  if (problems->empty()) return report;
  std::vector<std::vector<int32_t>> prompts;
  for (const AdditionProblem& p : *problems)
    prompts.push_back(addition_prompt_tokens(p));
  absl::StatusOr<std::vector<std::vector<int32_t>>> generated = generate_tokens(
      model_, prompts, {.max_new_tokens = addition_answer_length(request.task.digits)});
  if (!generated.ok()) return generated.status();
  for (size_t i = 0; i < problems->size(); ++i) {
    const AdditionProblem& problem = (*problems)[i];
    std::string answer = ByteTokenizer::decode((*generated)[i]);
    bool right = check_answer(problem, answer);
    report.correct += right ? 1 : 0;
    if (report.examples.size() < 4) {
      report.examples.push_back(
          absl::StrCat(problem.prompt, absl::CEscape(answer),
                       right ? std::string("  (right)") : "  (expected " + problem.answer + ")"));
    }
  }
  report.total = static_cast<int>(problems->size());
  return report;
}

absl::StatusOr<std::vector<int32_t>> PipelineStageActor::generate(std::vector<int32_t> prompt,
                                                                  int max_new_tokens,
                                                                  float temperature,
                                                                  uint64_t seed) {
  absl::StatusOr<std::vector<std::vector<int32_t>>> out =
      generate_tokens(model_, {std::move(prompt)},
                      {.max_new_tokens = max_new_tokens, .temperature = temperature, .seed = seed});
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

}  // namespace troupe::actors
