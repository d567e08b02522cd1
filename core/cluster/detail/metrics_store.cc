#include "core/cluster/detail/metrics_store.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace troupe::cluster {

void MetricsStore::add(MetricsReport report) {
  step_ = report.step;
  if (report.points.size() > kSeries) report.points.resize(kSeries);
  if (report.events.size() > kEvents) report.events.resize(kEvents);
  for (const MetricPoint& p : report.points) {
    auto key = std::make_pair(p.name, p.labels);
    if (latest_.size() >= kSeries && !latest_.contains(key)) continue;
    latest_[std::move(key)] = p.value;
  }
  for (MetricHelp& h : report.help) {
    if (help_.size() < kSeries || help_.contains(h.name)) help_[h.name] = std::move(h.text);
  }
  report.help.clear();
  for (std::string& e : report.events) {
    events_.push_back(absl::StrCat("step ", report.step, ": ", e));
    if (events_.size() > kEvents) events_.pop_front();
  }
  report.events.clear();
  if (!report.timeline.empty()) {
    if (report.timeline.size() > kSpans) report.timeline.resize(kSpans);
    timelines_.push_back({.step = report.step, .spans = std::move(report.timeline)});
    if (timelines_.size() > kTimelines) timelines_.pop_front();
  }
  report.timeline.clear();
  if (reports_++ % stride_ != 0) return;
  // Per-rank values are kept as the latest only: a job of thousands of ranks would fill the
  // history with them.
  std::erase_if(report.points,
                [](const MetricPoint& p) { return p.labels.find("rank=") != std::string::npos; });
  history_.push_back(std::move(report));
  if (history_.size() < kHistory) return;
  // Full: keep every other one (the first stays), and take every other report from now on.
  std::deque<MetricsReport> kept;
  for (size_t i = 0; i < history_.size(); i += 2)
    kept.push_back(std::move(history_[i]));
  history_ = std::move(kept);
  stride_ *= 2;
}

std::vector<MetricPoint> MetricsStore::latest() const {
  std::vector<MetricPoint> out;
  out.reserve(latest_.size());
  for (const auto& [key, value] : latest_)
    out.push_back({.name = key.first, .labels = key.second, .value = value});
  return out;
}

std::vector<MetricHelp> MetricsStore::help() const {
  std::vector<MetricHelp> out;
  for (const auto& [name, text] : help_)
    out.push_back({.name = name, .text = text});
  return out;
}

JobMetrics MetricsStore::snapshot(uint32_t job) const {
  return {.job = job,
          .step = step_,
          .latest = latest(),
          .history = {history_.begin(), history_.end()},
          .events = {events_.begin(), events_.end()},
          .help = help(),
          .timelines = {timelines_.begin(), timelines_.end()}};
}

}  // namespace troupe::cluster
