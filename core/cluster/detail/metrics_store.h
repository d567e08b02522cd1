// MetricsStore: what the head keeps of one job's reports (Cluster::report_metrics) - the latest
// value of every series, the last kTimelines timelines, a bounded history of the reports' job-wide
// values (all but the per-rank ones, those labelled rank=..., which are kept only as the latest)
// and a bounded list of the events. The history keeps at most kHistory reports: when full, every
// other one is dropped and from then on only every other report is kept, so it always spans the
// run, evenly, at a grain that doubles as the run grows (what TensorBoard's reservoir does for long
// runs, deterministically). Pure bookkeeping; NOT thread-safe (the head's service calls it from its
// actor).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "core/cluster/protocol.h"

namespace troupe::cluster {

class MetricsStore {
 public:
  static constexpr size_t kHistory = 1024;
  static constexpr size_t kEvents = 256;
  // Distinct (name, labels) kept, later new ones dropped; and the most points a report keeps.
  static constexpr size_t kSeries = 65536;
  static constexpr size_t kSpans = 16384;  // of a timeline
  static constexpr size_t kTimelines = 3;

  // Takes a report: its values replace the latest of their series, it joins the history (as the
  // grain allows), its events the list (the oldest dropped past kEvents).
  void add(MetricsReport report);

  // Forgets the history (an ended job's, once newer ones ended): the latest values and the
  // events stay.
  void drop_history() { history_.clear(); }

  int64_t step() const { return step_; }
  // The latest value of each series, by name then labels.
  std::vector<MetricPoint> latest() const;
  std::vector<MetricHelp> help() const;
  // All of it, for job `job`.
  JobMetrics snapshot(uint32_t job) const;

 private:
  int64_t step_ = 0;
  std::map<std::pair<std::string, std::string>, double> latest_;
  std::map<std::string, std::string> help_;
  std::deque<MetricsReport> history_;
  std::deque<std::string> events_;
  std::deque<JobTimeline> timelines_;  // the last reports' that had one
  uint64_t reports_ = 0;               // taken so far
  uint64_t stride_ = 1;                // every stride_-th report joins the history
};

}  // namespace troupe::cluster
