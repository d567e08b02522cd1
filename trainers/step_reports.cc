#include "trainers/step_reports.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::trainers {
namespace {

std::string range_text(const actors::StepReport& r) {
  return absl::StrCat("[", r.owned.begin, ", ", r.owned.end, ")");
}

// The squared norm of each distinct owned range, checked (see the header).
absl::StatusOr<double> sum_owned_norms(int64_t step, std::span<const actors::StepReport> reports,
                                       bool found_inf) {
  // (slice, begin, end) -> the first report that owns it.
  std::map<std::tuple<int, size_t, size_t>, const actors::StepReport*> owners;
  std::map<int, int64_t> slice_params;
  for (const actors::StepReport& r : reports) {
    if (r.owned.end < r.owned.begin || r.owned.end > static_cast<size_t>(r.slice_params)) {
      return absl::InternalError(absl::StrCat("step ", step, ": stage ", actors::to_string(r.at),
                                              " owns gradients ", range_text(r), " outside its ",
                                              r.slice_params, " parameters"));
    }
    auto [size, fresh] = slice_params.emplace(r.at.t, r.slice_params);
    if (!fresh && size->second != r.slice_params) {
      return absl::InternalError(absl::StrCat("step ", step, ": stages of tensor slice ", r.at.t,
                                              " disagree on its size (", size->second, " and ",
                                              r.slice_params, " parameters)"));
    }
    auto [it, first] = owners.emplace(std::make_tuple(r.at.t, r.owned.begin, r.owned.end), &r);
    if (first || found_inf || it->second->grad_norm_sq == r.grad_norm_sq) continue;
    return absl::InternalError(absl::StrCat(
        "step ", step, ": stages ", actors::to_string(it->second->at), " and ",
        actors::to_string(r.at), " own the same gradients ", range_text(r),
        " but hold different ones after the exchange (squared norms ", it->second->grad_norm_sq,
        " and ", r.grad_norm_sq, "): the replicas diverged"));
  }
  double total = 0;
  int slice = -1;
  size_t covered = 0;
  const actors::StepReport* previous = nullptr;
  auto close_slice = [&]() -> absl::Status {
    if (slice >= 0 && covered != static_cast<size_t>(slice_params[slice])) {
      return absl::InternalError(absl::StrCat(
          "step ", step, ": the stages of tensor slice ", slice, " own gradients up to ", covered,
          " of its ", slice_params[slice], " parameters; the rest has no owner"));
    }
    return absl::OkStatus();
  };
  for (const auto& [key, r] : owners) {
    if (std::get<0>(key) != slice) {
      if (absl::Status s = close_slice(); !s.ok()) return s;
      slice = std::get<0>(key);
      covered = 0;
      previous = nullptr;
    }
    if (r->owned.begin != covered) {
      return absl::InternalError(
          r->owned.begin < covered
              ? absl::StrCat("step ", step, ": stages ", actors::to_string(previous->at), " and ",
                             actors::to_string(r->at), " own overlapping gradients ",
                             range_text(*previous), " and ", range_text(*r))
              : absl::StrCat("step ", step, ": no stage of tensor slice ", slice,
                             " owns the gradients [", covered, ", ", r->owned.begin, ")"));
    }
    covered = r->owned.end;
    previous = r;
    total += r->grad_norm_sq;
  }
  if (absl::Status s = close_slice(); !s.ok()) return s;
  return total;
}

// The pipeline stage a report's rank belongs to: its p, or under interleaved
// 1F1B (chunk c of stage s is virtual stage c x stages + s) its s.
int stage_of(const actors::StepReport& r, int virtual_stages) {
  const int stages = std::max(virtual_stages / std::max(r.chunks, 1), 1);
  return r.at.p % stages;
}

// The virtual stages the reports come from: one more than the largest p.
int virtual_stages_of(std::span<const actors::StepReport> reports) {
  int out = 1;
  for (const actors::StepReport& r : reports)
    out = std::max(out, r.at.p + 1);
  return out;
}

}  // namespace

double pipeline_bubble(std::span<const actors::StepReport> reports) {
  struct Pipeline {
    double busy = 0, makespan = 0;
    std::set<int> stages;  // an interleaved stage's chunks are one stage
  };
  const int virtual_stages = virtual_stages_of(reports);
  std::map<int, Pipeline> pipelines;  // by replica
  for (const actors::StepReport& r : reports) {
    if (r.at.t != 0 || r.timeline.empty()) continue;
    Pipeline& p = pipelines[r.at.d];
    p.busy += r.forward_ms + r.backward_ms;
    p.makespan = std::max(p.makespan, r.schedule_ms);
    p.stages.insert(stage_of(r, virtual_stages));
  }
  double sum = 0;
  for (const auto& [d, p] : pipelines) {
    if (p.stages.size() >= 2 && p.makespan > 0) {
      const auto stages = static_cast<double>(p.stages.size());
      sum += std::max(0.0, 1 - p.busy / (stages * p.makespan));
    }
  }
  return pipelines.empty() ? 0 : sum / static_cast<double>(pipelines.size());
}

absl::StatusOr<StepTotals> combine_reports(int64_t step,
                                           std::span<const actors::StepReport> reports) {
  StepTotals out;
  double weighted_loss = 0;
  for (const actors::StepReport& r : reports) {
    if (r.step != step) {
      return absl::InternalError(absl::StrCat("step ", step, ": stage ", actors::to_string(r.at),
                                              " reported step ", r.step));
    }
    if (r.holds_loss && r.at.t == 0) {
      weighted_loss += r.loss * static_cast<double>(r.samples);
      out.samples += r.samples;
      out.tokens += r.tokens;
      out.sample_ids.insert(out.sample_ids.end(), r.sample_ids.begin(), r.sample_ids.end());
    }
    out.data_position = std::max(out.data_position, r.data_position);
    out.epoch = std::max(out.epoch, r.epoch);
    out.compute_ms = std::max(out.compute_ms, r.forward_ms + r.backward_ms);
    out.comm_ms = std::max(out.comm_ms, r.comm_ms);
    out.comm_exposed_ms = std::max(out.comm_exposed_ms, r.comm_exposed_ms);
    out.stage_ms = std::max(out.stage_ms, r.step_ms);
    out.found_inf = out.found_inf || r.found_inf;
  }
  // Per rank: an interleaved stage's chunks are one rank's.
  const int virtual_stages = virtual_stages_of(reports);
  std::map<std::tuple<int, int, int>, RankUsage> ranks;
  for (const actors::StepReport& r : reports) {
    const int p = stage_of(r, virtual_stages);
    RankUsage& u = ranks[{r.at.d, p, r.at.t}];
    u.at = {.d = r.at.d, .p = p, .t = r.at.t};
    u.memory = u.memory.plus(r.memory);
    u.sent = u.sent.plus(r.sent);
    u.forward_ms += r.forward_ms;
    u.backward_ms += r.backward_ms;
    u.comm_ms += r.comm_ms;
    u.comm_exposed_ms += r.comm_exposed_ms;
    u.step_ms = std::max(u.step_ms, r.step_ms);
    u.updated_step = r.updated_step;
    u.update_ms += r.update_ms;
  }
  for (const auto& [at, rank] : ranks) {
    out.memory = out.memory.max_with(rank.memory);
    out.sent = out.sent.max_with(rank.sent);
    out.ranks.push_back(rank);
  }
  if (out.samples == 0) {
    return absl::InternalError(
        absl::StrCat("step ", step, ": no stage reported the loss of any sample"));
  }
  out.loss = weighted_loss / static_cast<double>(out.samples);
  out.bubble = pipeline_bubble(reports);
  absl::StatusOr<double> norm = sum_owned_norms(step, reports, out.found_inf);
  if (!norm.ok()) return norm.status();
  out.grad_norm_sq = *norm;
  return out;
}

}  // namespace troupe::trainers
