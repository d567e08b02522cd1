#include "actors/pipeline_stage_actor.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "actors/data/byte_tokenizer.h"
#include "actors/data/data_loader.h"
#include "actors/generation.h"
#include "actors/handoff.h"
#include "nn/dtype.h"
#include "nn/optim/clip.h"
#include "nn/threads.h"

namespace troupe::actors {
namespace {

double ms_since_epoch(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t.time_since_epoch()).count();
}

double now_ms() {
  return ms_since_epoch(std::chrono::steady_clock::now());
}

nn::GPT build_model(const StageOptions& options) {
  if (options.micro_batch < 1 || options.grad_accum < 1) {
    throw std::invalid_argument(absl::StrCat("stage: micro_batch ", options.micro_batch,
                                             " and grad_accum ", options.grad_accum,
                                             " must be >= 1"));
  }
  if (options.mesh.pp != 1 || options.mesh.tp != 1) {
    throw std::invalid_argument("stage: only pp = 1 and tp = 1 are implemented");
  }
  absl::StatusOr<nn::GPT> model = nn::GPT::create(
      options.model.gpt(), {.recompute_activations = options.model.recompute_activations});
  if (!model.ok()) throw std::invalid_argument(std::string(model.status().message()));
  return *std::move(model);
}

}  // namespace

PipelineStageActor::PipelineStageActor(StageOptions options)
    : options_(std::move(options)), name_(actor_name(options_.job, "stage", options_.at)) {
  if (options_.threads > 0) nn::set_num_threads(options_.threads);
  model_.emplace(build_model(options_));
  tensors_ = std::make_shared<StageTensors>(
      StageTensors{model_->params(), model_->grads(), model_->num_params()});
  buckets_.emplace(model_->param_layout(),
                   static_cast<size_t>(std::max<int64_t>(options_.bucket_elements, 1)),
                   model_->param_layout().wpe());  // wte: its two shares, below
  Handoff::publish(name_, tensors_);
}

PipelineStageActor::~PipelineStageActor() {
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
    group_ = *std::move(group);
  }
  return absl::OkStatus();
}

void PipelineStageActor::issue_range(float* data, size_t count,
                                     std::vector<transport::Work>& pending,
                                     std::vector<double>& issued_at) {
  const double t0 = now_ms();
  issued_at.push_back(t0);
  pending.push_back(group_->allreduce_async(DType::kFloat32, ReduceOp::kAvg, data, count));
  // Whatever issuing does on this thread holds up backward: it is exposed.
  issue_ms_ += now_ms() - t0;
}

void PipelineStageActor::issue(const std::vector<size_t>& ready,
                               std::vector<transport::Work>& pending,
                               std::vector<double>& issued_at) {
  for (size_t i : ready) {
    const GradientBucket& b = buckets_->buckets()[i];
    issue_range(model_->grads() + b.begin, b.end - b.begin, pending, issued_at);
  }
}

transport::Work PipelineStageActor::issue_token_mask(const std::vector<int32_t>& inputs) {
  const double t0 = now_ms();
  token_mask_.assign(static_cast<size_t>(model_->config().vocab_size), 0.0f);
  for (int32_t token : inputs) {
    // Out-of-range tokens are left for forward to refuse.
    if (token >= 0 && static_cast<size_t>(token) < token_mask_.size()) token_mask_[token] = 1.0f;
  }
  transport::Work work = group_->allreduce_async(DType::kFloat32, ReduceOp::kMax,
                                                 token_mask_.data(), token_mask_.size());
  issue_ms_ += now_ms() - t0;
  return work;
}

absl::Status PipelineStageActor::backward_with_buckets(float dloss, transport::Work& token_mask,
                                                       std::vector<transport::Work>& pending,
                                                       std::vector<double>& issued_at) {
  nn::GPT& gpt = *model_;
  const nn::GPTParamLayout& layout = gpt.param_layout();
  const int L = gpt.config().num_layers;
  const size_t C = static_cast<size_t>(gpt.config().channels);
  const bool overlap = options_.overlap_comm;
  buckets_->reset();
  if (absl::Status s = gpt.head_backward(dloss); !s.ok()) return s;
  // wte's gradient: the head's share (and earlier micro-batches' whole gradients) is final.
  if (overlap) issue_range(gpt.grads(), layout.wpe(), pending, issued_at);
  if (overlap) issue(buckets_->ready(layout.block_begin(L)), pending, issued_at);
  nn::GPT::GradientsFinal on_final;
  if (overlap) on_final = [&](size_t from) { issue(buckets_->ready(from), pending, issued_at); };
  if (absl::Status s = gpt.backward_blocks(0, L, on_final); !s.ok()) return s;
  // The embedding's share: the rows of the tokens in any replica's micro-batch.
  if (absl::Status s = CollectiveGroup::wait(token_mask); !s.ok()) return s;
  row_of_.assign(token_mask_.size(), -1);
  row_tokens_.clear();
  for (size_t v = 0; v < token_mask_.size(); ++v) {
    if (token_mask_[v] == 0.0f) continue;
    row_of_[v] = static_cast<int32_t>(row_tokens_.size());
    row_tokens_.push_back(static_cast<int32_t>(v));
  }
  rows_.assign(row_tokens_.size() * C, 0.0f);
  if (absl::Status s =
          gpt.embed_backward_rows(rows_.data(), row_of_, static_cast<int>(row_tokens_.size()));
      !s.ok()) {
    return s;
  }
  if (!overlap) issue_range(gpt.grads(), layout.wpe(), pending, issued_at);
  issue(buckets_->ready(0), pending, issued_at);
  if (!rows_.empty()) issue_range(rows_.data(), rows_.size(), pending, issued_at);
  return absl::OkStatus();
}

void PipelineStageActor::add_embedding_rows() {
  const size_t C = static_cast<size_t>(model_->config().channels);
  float* dwte = model_->grads();  // wte is the buffer's first tensor
  for (size_t r = 0; r < row_tokens_.size(); ++r) {
    float* d = dwte + static_cast<size_t>(row_tokens_[r]) * C;
    const float* g = rows_.data() + r * C;
    for (size_t i = 0; i < C; ++i)
      d[i] += g[i];
  }
  row_tokens_.clear();
  rows_.clear();
}

absl::StatusOr<StepReport> PipelineStageActor::run_step(StepRequest request) {
  if (loader_ == nullptr) return absl::FailedPreconditionError(name_ + ": run_step before setup");
  nn::GPT& gpt = *model_;
  const double start = now_ms();
  StepReport report;
  report.step = request.step;
  gpt.zero_grad();
  const int B = options_.micro_batch;
  const int T = options_.model.seq_len;
  const bool reduce = group_ != nullptr;
  std::vector<transport::Work> pending;
  std::vector<double> issued_at;
  issue_ms_ = 0;
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
    // The union of the replicas' token masks is reduced while forward runs.
    transport::Work token_mask;
    if (reduce && last) token_mask = issue_token_mask(batch->inputs);
    double t0 = now_ms();
    absl::StatusOr<float> loss = gpt.forward(batch->inputs.data(), batch->targets.data(), B, T);
    if (!loss.ok()) return loss.status();
    loss_sum += *loss;
    double t1 = now_ms();
    report.forward_ms += t1 - t0;
    // Each micro-batch's mean loss weighs 1 / grad_accum; the loss scale
    // rides on the same factor.
    const float dloss = request.loss_scale / static_cast<float>(options_.grad_accum);
    if (reduce && last) {
      if (absl::Status s = backward_with_buckets(dloss, token_mask, pending, issued_at); !s.ok()) {
        return s;
      }
    } else if (absl::Status s = gpt.backward(dloss); !s.ok()) {
      return s;
    }
    report.backward_ms += now_ms() - t1;
  }
  const double backward_done = now_ms();
  for (size_t i = 0; i < pending.size(); ++i) {
    if (absl::Status s = CollectiveGroup::wait(pending[i]); !s.ok()) return s;
    // To its completion, not to this wait: a bucket issued early in backward
    // is seen here only after backward.
    report.comm_ms += ms_since_epoch(pending[i].finished_at()) - issued_at[i];
  }
  report.comm_exposed_ms = pending.empty() ? 0 : issue_ms_ + now_ms() - backward_done;
  if (reduce) add_embedding_rows();
  if (options_.precision == Precision::kFp16) {
    // fp16 gradients: values beyond 65504 become inf, as they would there.
    half_grads_.resize(gpt.num_params());
    const auto n = static_cast<int64_t>(gpt.num_params());
    nn::convert(gpt.grads(), nn::DType::kFloat32, half_grads_.data(), nn::DType::kFloat16, n);
    nn::convert(half_grads_.data(), nn::DType::kFloat16, gpt.grads(), nn::DType::kFloat32, n);
  }
  report.loss = loss_sum / options_.grad_accum;
  report.grad_norm_sq = nn::grad_norm_squared(gpt.grads(), gpt.num_params());
  report.found_inf = !std::isfinite(report.grad_norm_sq);
  report.samples = static_cast<int64_t>(B) * options_.grad_accum;
  report.tokens = report.samples * T;
  report.step_ms = now_ms() - start;
  return report;
}

absl::Status PipelineStageActor::discard(int64_t /*step*/) {
  model_->zero_grad();
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
      *model_, prompts, {.max_new_tokens = addition_answer_length(request.task.digits)});
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
      generate_tokens(*model_, {std::move(prompt)},
                      {.max_new_tokens = max_new_tokens, .temperature = temperature, .seed = seed});
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

TROUPE_ACTOR_CONSTRUCTOR(PipelineStageActor, StageOptions);

}  // namespace troupe::actors
