// Checking a schedule by running it: each stage goes through its program
// in order, a send costs nothing and does not wait, and a receive waits
// until its message was sent. Whatever the stages' relative speeds, a
// schedule that gets through this way gets through on real stages.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/pipeline/schedule.h"

namespace troupe::actors::pipeline {
namespace {

// A message between virtual stages: (gradient?, receiving virtual stage, micro-batch).
using Message = std::tuple<bool, int, int>;
using Pass = std::pair<int, int>;  // (micro-batch, chunk)

struct StageState {
  size_t next = 0;  // the op it runs next
  double clock = 0;
  double busy = 0;
  int held = 0;
  int held_max = 0;
  std::set<Pass> forwarded, backwarded, got_input, got_gradient;
};

}  // namespace

absl::Status check_schedule(const Schedule& schedule, ScheduleRun* run, double forward_cost,
                            double backward_cost) {
  const int p = schedule.stages;
  const int v = schedule.chunks;
  const int last = p * v - 1;
  if (static_cast<int>(schedule.programs.size()) != p) {
    return absl::FailedPreconditionError(absl::StrCat(schedule.name, ": ", schedule.programs.size(),
                                                      " programs for ", p, " stages"));
  }
  std::vector<StageState> stages(p);
  std::map<Message, double> sent;  // when
  std::set<Message> received;
  auto fault = [&](int s, const PipelineOp& op, const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(schedule.name, ", stage ", s, ", op ",
                                                      stages[s].next, " (", to_string(op, v > 1),
                                                      "): ", why));
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      StageState& st = stages[s];
      const std::vector<PipelineOp>& program = schedule.programs[s];
      for (; st.next < program.size(); ++st.next) {
        const PipelineOp& op = program[st.next];
        if (op.micro < 0 || op.micro >= schedule.micro_batches || op.chunk < 0 || op.chunk >= v) {
          return fault(s, op, "no such micro-batch or chunk");
        }
        const int vs = op.chunk * p + s;
        const Pass pass{op.micro, op.chunk};
        bool blocked = false;
        switch (op.kind) {
          case OpKind::kForward:
            if (st.forwarded.contains(pass)) return fault(s, op, "a second forward");
            if (vs > 0 && !st.got_input.contains(pass))
              return fault(s, op, "its input not received");
            st.forwarded.insert(pass);
            st.clock += forward_cost / v;
            st.busy += forward_cost / v;
            st.held_max = std::max(st.held_max, ++st.held);
            break;
          case OpKind::kBackward:
            if (!st.forwarded.contains(pass)) return fault(s, op, "a backward before its forward");
            if (st.backwarded.contains(pass)) return fault(s, op, "a second backward");
            if (vs < last && !st.got_gradient.contains(pass)) {
              return fault(s, op, "its output's gradient not received");
            }
            st.backwarded.insert(pass);
            st.clock += backward_cost / v;
            st.busy += backward_cost / v;
            --st.held;
            break;
          case OpKind::kSendActivation:
          case OpKind::kSendGradient: {
            const bool gradient = op.kind == OpKind::kSendGradient;
            if (gradient ? vs == 0 : vs == last) return fault(s, op, "no stage to send to");
            if (!(gradient ? st.backwarded : st.forwarded).contains(pass)) {
              return fault(s, op, "sends what it has not computed");
            }
            if (!sent.emplace(Message{gradient, gradient ? vs - 1 : vs + 1, op.micro}, st.clock)
                     .second) {
              return fault(s, op, "sent twice");
            }
            break;
          }
          case OpKind::kRecvActivation:
          case OpKind::kRecvGradient: {
            const bool gradient = op.kind == OpKind::kRecvGradient;
            if (gradient ? vs == last : vs == 0) return fault(s, op, "no stage to receive from");
            const Message m{gradient, vs, op.micro};
            auto it = sent.find(m);
            if (it == sent.end()) {
              blocked = true;  // until its sender gets there
              break;
            }
            if (!received.insert(m).second) return fault(s, op, "received twice");
            st.clock = std::max(st.clock, it->second);
            (gradient ? st.got_gradient : st.got_input).insert(pass);
            break;
          }
        }
        if (blocked) break;
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (int s = 0; s < p; ++s) {
    const std::vector<PipelineOp>& program = schedule.programs[s];
    if (stages[s].next < program.size()) {
      stuck.push_back(absl::StrCat("stage ", s, " at ", to_string(program[stages[s].next], v > 1)));
    }
  }
  if (!stuck.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(schedule.name, " deadlocks: ", absl::StrJoin(stuck, ", ")));
  }
  for (int s = 0; s < p; ++s) {
    const size_t passes = static_cast<size_t>(schedule.micro_batches) * v;
    if (stages[s].forwarded.size() != passes || stages[s].backwarded.size() != passes) {
      return absl::FailedPreconditionError(absl::StrCat(
          schedule.name, ", stage ", s, ": ", stages[s].forwarded.size(), " forwards and ",
          stages[s].backwarded.size(), " backwards of the ", passes, " micro-batch chunks"));
    }
  }
  if (received.size() != sent.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        schedule.name, ": ", sent.size() - received.size(), " messages sent, never received"));
  }
  if (run != nullptr) {
    *run = {};
    double busy = 0;
    for (const StageState& st : stages) {
      run->makespan = std::max(run->makespan, st.clock);
      busy += st.busy;
      run->held_max.push_back(st.held_max);
    }
    run->bubble = run->makespan > 0 ? 1 - busy / (p * run->makespan) : 0;
  }
  return absl::OkStatus();
}

}  // namespace troupe::actors::pipeline
