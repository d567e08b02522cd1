// PipelineStageActor's step: its schedule's program
// (actors/pipeline/schedule.h) run op by op; one stage (pp 1) runs each
// micro-batch's forward and then its backward, with nothing to pass. Each
// micro-batch's forward takes an activation slot of the model
// (nn::Model::use_slot) until its backward is done; activations and their
// gradients go to the neighbouring stages over the pipe group, whose sends
// return at once and whose receives wait (as check_schedule simulates).
// Nothing is copied where the transport allows: a send lends the transport
// the memory the stage computed in (waited for before that memory is written
// again: StageSends), and a receive posted before its message arrives has it
// land where the stage computes next. A tied head: the first stage sends the
// token embedding to the last before the step, and the last sends back the head's
// share of its gradient, which the first adds before its last backward, ahead
// of the reduction.
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/data/data_loader.h"
#include "actors/failpoint.h"
#include "actors/pipeline_stage_actor.h"
#include "actors/stage_sends.h"
#include "actors/step_clock.h"
#include "spdlog/spdlog.h"

namespace troupe::actors {
namespace {

using pipeline::OpKind;
using pipeline::PipelineOp;

// What travels between two stages, and its tag on the pipe group: the step,
// what it is, and the micro-batch.
enum class Wire : uint64_t {
  kActivation = 1,
  kGradient = 2,
  kEmbedding = 3,
  kEmbeddingGrad = 4,
};

uint64_t wire_tag(int64_t step, Wire what, int micro) {
  return (static_cast<uint64_t>(step) << 24) | (static_cast<uint64_t>(what) << 20) |
         static_cast<uint64_t>(micro);
}

}  // namespace

absl::Status PipelineStageActor::share_embedding(int64_t step, StageSends& sends) {
  const nn::ModelLayout& layout = model_->layout();
  if (!layout.tied_head() || pipe_ == nullptr) return absl::OkStatus();
  const size_t bytes = layout.token_embedding().size() * sizeof(float);
  const int last = options_.mesh.pp - 1;
  if (plan_.first()) {
    const float* embedding = buffers_->params(0);
    sends.add(embedding, pipe_->send_borrowed_async(last, wire_tag(step, Wire::kEmbedding, 0),
                                                    embedding, bytes));
    return absl::OkStatus();
  }
  if (plan_.last())
    return pipe_->recv_in_place(0, wire_tag(step, Wire::kEmbedding, 0), buffers_->params(0), bytes);
  return absl::OkStatus();
}

void PipelineStageActor::send_embedding_grad(int64_t step, StageSends& sends) {
  const nn::ModelLayout& layout = model_->layout();
  if (!layout.tied_head() || pipe_ == nullptr) return;
  const size_t bytes = layout.token_embedding().size() * sizeof(float);
  const float* grad = buffers_->grads(0);
  sends.add(grad,
            pipe_->send_borrowed_async(0, wire_tag(step, Wire::kEmbeddingGrad, 0), grad, bytes));
}

absl::Status PipelineStageActor::add_embedding_grad(int64_t step) {
  const nn::ModelLayout& layout = model_->layout();
  if (!layout.tied_head() || pipe_ == nullptr) return absl::OkStatus();
  const size_t n = layout.token_embedding().size();
  // Received where the gradients live (the model's device), then added there.
  if (head_share_.size() != n) {
    if (absl::Status s = head_share_.reset(nn::MemoryCategory::kOther, n, false, model_->device());
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          pipe_->recv_in_place(options_.mesh.pp - 1, wire_tag(step, Wire::kEmbeddingGrad, 0),
                               head_share_.data(), n * sizeof(float));
      !s.ok()) {
    return s;
  }
  return device_backend_->add(model_->device().index, buffers_->grads(0), head_share_.data(), n);
}

void PipelineStageActor::settle_sends(const absl::Status& why) {
  if (sends_->in_flight() == 0) return;
  absl::Status s = sends_->await_all(nullptr, absl::Now() + kSettleTimeout);
  if (!absl::IsDeadlineExceeded(s)) return;  // every one let go of (some may have failed)
  // A peer that takes nothing (hung): its connections go, and with them the
  // transport's hold on this stage's memory.
  std::vector<int> others;
  for (int r = 0; r < pipe_->world_size(); ++r) {
    if (r != pipe_->rank()) others.push_back(r);
  }
  pipe_->abort(absl::AbortedError(why.message()), others);
  s = sends_->await_all(nullptr, absl::Now() + kSettleTimeout);
  if (absl::IsDeadlineExceeded(s)) {
    spdlog::error("{}: sends of a failed step still held by the transport: {}", name_,
                  std::string(s.message()));
  }
}

absl::StatusOr<StepReport> PipelineStageActor::run_schedule(const StepRequest& request) {
  nn::Model& gpt = *model_;
  const double start = now_ms();
  StepReport report;
  if (absl::Status s = start_step(request, report); !s.ok()) return s;
  const int B = options_.micro_batch;
  const int T = options_.model.max_seq_len();
  const int m = options_.grad_accum;
  const int p = plan_.stage;  // its (virtual) stage: its rank in the pipe group
  const size_t bytes = static_cast<size_t>(B) * T * options_.model.hidden_size() * sizeof(float);
  if (schedule_.micro_batches != m) {
    return absl::InternalError(absl::StrCat(name_, ": its schedule has ", schedule_.micro_batches,
                                            " micro-batches, its step ", m));
  }
  // This actor's ops: its stage's program, or under interleaved 1F1B its chunk's ops of it.
  const std::vector<PipelineOp>& program = program_.ops;
  if (absl::Status s = gpt.prepare(B, T); !s.ok()) return s;
  // A group that lost a member cannot finish the step: no more work for it.
  const GoOn go_on = [this]() -> absl::Status {
    if (pipe_ != nullptr) {
      if (absl::Status s = pipe_->failed(); !s.ok()) return s;
    }
    return group_ != nullptr ? group_->failed() : absl::OkStatus();
  };
  const absl::Time deadline = absl::Now() + kPipeTimeout;
  StageSends& sends = *sends_;  // empty: the last step waited for its sends, or settled them
  if (absl::Status s = share_embedding(request.step, sends); !s.ok()) return s;
  size_t last_backward = 0;
  for (size_t i = 0; i < program.size(); ++i) {
    if (program[i].kind == OpKind::kBackward) last_backward = i;
  }
  // Each micro-batch's activation slot, from its forward to its backward.
  std::vector<int> slot_of(static_cast<size_t>(m), -1);
  std::vector<int> free_slots;
  for (int k = gpt.activation_slots() - 1; k >= 0; --k)
    free_slots.push_back(k);
  auto use_slot = [&](int micro) -> absl::Status {
    int& slot = slot_of[static_cast<size_t>(micro)];
    const bool fresh = slot < 0;
    if (fresh) {
      if (free_slots.empty()) {
        return absl::InternalError(absl::StrCat(name_, ": micro-batch ", micro,
                                                " finds no free activation slot of ",
                                                gpt.activation_slots()));
      }
      slot = free_slots.back();
      free_slots.pop_back();
    }
    gpt.use_slot(slot);
    // A slot taken anew: its last activation may still be on its way to the next stage.
    return fresh ? sends.await(gpt.residual(plan_.block_end), go_on, deadline) : absl::OkStatus();
  };
  // Each micro-batch's mean loss weighs 1 / m; the loss scale rides on it.
  const float dloss = request.loss_scale / static_cast<float>(m);
  double loss_sum = 0;
  const double began = now_ms();
  // Every stage reports when each op ran: a pipeline's bubble (the controller's), and the run's
  // timeline and trace (docs/observability.md).
  report.timeline.reserve(program.size());
  for (size_t i = 0; i < program.size(); ++i) {
    const PipelineOp& op = program[i];
    if (absl::Status s = go_on(); !s.ok()) return s;
    // Interleaved: the op waits for the turn its stage's program gives it.
    if (turns_ != nullptr) {
      if (absl::Status s = turns_->await(chunk_, request.step, program_.turns[i], go_on, deadline);
          !s.ok()) {
        return s;
      }
    }
    // (A gradient sent back is backward's scratch, not the slot's.)
    if (op.kind != OpKind::kSendGradient) {
      if (absl::Status s = use_slot(op.micro); !s.ok()) return s;
    }
    double t0 = now_ms();
    const double op_began = t0;  // t0 moves past what the op waits for
    switch (op.kind) {
      case OpKind::kRecvActivation:
        if (absl::Status s =
                pipe_->recv_in_place(p - 1, wire_tag(request.step, Wire::kActivation, op.micro),
                                     gpt.residual(plan_.block_begin), bytes);
            !s.ok()) {
          return s;
        }
        break;
      case OpKind::kSendActivation: {
        const float* out = gpt.residual(plan_.block_end);
        sends.add(out, pipe_->send_borrowed_async(
                           p + 1, wire_tag(request.step, Wire::kActivation, op.micro), out, bytes));
        break;
      }
      case OpKind::kRecvGradient:
        // Into the scratch the last gradient sent back may still be read from.
        if (absl::Status s = sends.await(gpt.dresidual(), go_on, deadline); !s.ok()) return s;
        if (absl::Status s = pipe_->recv_in_place(
                p + 1, wire_tag(request.step, Wire::kGradient, op.micro), gpt.dresidual(), bytes);
            !s.ok()) {
          return s;
        }
        break;
      case OpKind::kSendGradient: {
        const float* din = gpt.dresidual();
        sends.add(din, pipe_->send_borrowed_async(
                           p - 1, wire_tag(request.step, Wire::kGradient, op.micro), din, bytes));
        break;
      }
      case OpKind::kForward: {
        // Every stage's loader gives the replica's micro-batches in order:
        // the first stage reads their inputs, the last their targets.
        absl::StatusOr<Batch> batch = next_batch(report);
        if (!batch.ok()) return batch.status();
        if (op.micro == 0) failpoint("forward", options_.at, request.step);
        t0 = now_ms();  // the loader's wait is not compute
        absl::StatusOr<float> loss =
            sync_->forward(batch->inputs.data(), batch->targets.data(), B, T, op.micro + 1 == m);
        if (!loss.ok()) return loss.status();
        if (plan_.last()) loss_sum += *loss;
        report.forward_ms += now_ms() - t0;
        break;
      }
      case OpKind::kBackward: {
        const bool last = i == last_backward;
        if (last) failpoint("backward", options_.at, request.step);
        if (last && plan_.first()) {
          if (absl::Status s = add_embedding_grad(request.step); !s.ok()) return s;
          t0 = now_ms();  // the wait for the last stage's share is not compute
        }
        // The backward writes the scratch a gradient sent back is read from.
        if (absl::Status s = sends.await(gpt.dresidual(), go_on, deadline); !s.ok()) return s;
        if (absl::Status s = sync_->backward(dloss, last); !s.ok()) return s;
        report.backward_ms += now_ms() - t0;
        if (last && plan_.last()) send_embedding_grad(request.step, sends);
        // Its activations are done with.
        free_slots.push_back(slot_of[static_cast<size_t>(op.micro)]);
        slot_of[static_cast<size_t>(op.micro)] = -1;
        break;
      }
    }
    report.timeline.push_back({.kind = static_cast<int32_t>(op.kind),
                               .micro = op.micro,
                               .begin_ms = t0 - began,
                               .end_ms = now_ms() - began,
                               .wait_ms = t0 - op_began});
    if (turns_ != nullptr) turns_->ran(chunk_, program_.turns[i]);
  }
  report.schedule_ms = now_ms() - began;
  report.began_ms = began;
  // What was sent is read no more before the reduction and the update write it.
  if (absl::Status s = sends.await_all(go_on, deadline); !s.ok()) return s;
  SyncTimes times;
  failpoint("allreduce", options_.at, request.step);
  if (absl::Status s = sync_->finish(times); !s.ok()) return s;
  report.comm_ms = times.comm_ms;
  report.comm_exposed_ms = times.exposed_ms;
  report.loss = plan_.last() ? loss_sum / m : 0;
  if (absl::Status s = finish_report(report, start); !s.ok()) return s;
  return report;
}

}  // namespace troupe::actors
