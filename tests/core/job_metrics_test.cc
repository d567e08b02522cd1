// What the head keeps of a job's reports (core/cluster/detail/metrics_store.h) and how /metrics
// and `troupe status` show them (core/cluster/detail/http_status.h): the latest value per series,
// the history thinned evenly as it grows, the events bounded, and the troupe_train_ families in
// the Prometheus text format, a malformed series left out rather than breaking the page.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/detail/http_status.h"
#include "core/cluster/detail/metrics_store.h"

namespace troupe::cluster {
namespace {

MetricsReport report(int64_t step, double loss) {
  return {.step = step,
          .unix_seconds = 1000.0 + static_cast<double>(step),
          .points = {{.name = "loss", .value = loss},
                     {.name = "memory_bytes",
                      .labels = "rank=\"d0.p0.t0\",category=\"parameters\"",
                      .value = 4096}},
          .events = {},
          .help = {{.name = "loss", .text = "Mean training loss of the step's global batch."}}};
}

TEST(MetricsStoreTest, KeepsTheLatestValueOfEachSeries) {
  MetricsStore store;
  store.add(report(1, 2.5));
  store.add(report(2, 2.0));
  EXPECT_EQ(store.step(), 2);
  const std::vector<MetricPoint> latest = store.latest();
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].name, "loss");
  EXPECT_EQ(latest[0].value, 2.0);
  EXPECT_EQ(latest[1].labels, "rank=\"d0.p0.t0\",category=\"parameters\"");
  ASSERT_EQ(store.help().size(), 1u);
  const JobMetrics all = store.snapshot(7);
  EXPECT_EQ(all.job, 7u);
  ASSERT_EQ(all.history.size(), 2u);
  EXPECT_EQ(all.history[1].points[0].value, 2.0);
  EXPECT_TRUE(all.history[0].help.empty()) << "help is kept once, not per report";
}

TEST(MetricsStoreTest, HistoryStaysBoundedAndSpansTheRunEvenly) {
  MetricsStore store;
  const int64_t steps = 5 * MetricsStore::kHistory + 3;
  for (int64_t k = 0; k < steps; ++k)
    store.add(report(k, static_cast<double>(k)));
  const JobMetrics all = store.snapshot(1);
  ASSERT_LE(all.history.size(), MetricsStore::kHistory);
  ASSERT_GE(all.history.size(), MetricsStore::kHistory / 2);
  EXPECT_EQ(all.history.front().step, 0);
  const int64_t grain = all.history[1].step - all.history[0].step;
  EXPECT_GT(grain, 1);
  for (size_t i = 1; i < all.history.size(); ++i)
    EXPECT_EQ(all.history[i].step - all.history[i - 1].step, grain) << "at " << i;
  EXPECT_GT(all.history.back().step, steps - 1 - grain) << "it reaches the end of the run";
}

TEST(MetricsStoreTest, KeepsTheLastTimelines) {
  MetricsStore store;
  for (int64_t k = 1; k <= 10; ++k) {
    MetricsReport r = report(k, 1.0);
    if (k % 2 == 0) r.timeline = {{.track = "d0.p0.t0", .kind = "forward", .end_ms = 1}};
    store.add(std::move(r));
  }
  const JobMetrics all = store.snapshot(1);
  ASSERT_EQ(all.timelines.size(), MetricsStore::kTimelines);
  EXPECT_EQ(all.timelines.front().step, 6);
  EXPECT_EQ(all.timelines.back().step, 10);
  EXPECT_EQ(all.timelines.back().spans.size(), 1u);
  EXPECT_TRUE(all.history.back().timeline.empty()) << "kept once, not in the history";
}

TEST(MetricsStoreTest, EventsAreStampedAndBounded) {
  MetricsStore store;
  for (size_t k = 0; k < MetricsStore::kEvents + 10; ++k) {
    MetricsReport r = report(static_cast<int64_t>(k), 1.0);
    r.events = {absl::StrCat("checkpoint ", k)};
    store.add(std::move(r));
  }
  const JobMetrics all = store.snapshot(1);
  ASSERT_EQ(all.events.size(), MetricsStore::kEvents);
  EXPECT_EQ(all.events.back(), absl::StrCat("step ", MetricsStore::kEvents + 9, ": checkpoint ",
                                            MetricsStore::kEvents + 9));
}

ClusterStatus two_jobs() {
  ClusterStatus s;
  JobStatus a{.id = 3, .driver = "driver a", .state = JobState::kRunning};
  a.step = 12;
  a.metrics = {{.name = "loss", .value = 1.25},
               {.name = "tokens_per_second", .value = 45200},
               {.name = "recoveries_total", .value = 1},
               {.name = "memory_bytes",
                .labels = "rank=\"d1.p0.t0\",category=\"gradients\"",
                .value = 123456789012.0},
               {.name = "bad name", .value = 1},
               {.name = "step_seconds", .labels = "part=\"compute", .value = 1}};
  a.metrics_help = {{.name = "loss", .text = "Mean training loss."}};
  JobStatus b{.id = 9, .driver = "driver b", .state = JobState::kRunning};
  b.step = 3;
  b.metrics = {{.name = "loss", .value = std::numeric_limits<double>::quiet_NaN()}};
  s.jobs = {a, b};
  return s;
}

TEST(JobMetricsRenderTest, FamiliesAreGroupedTypedAndLabelledByJob) {
  std::string out;
  render_job_metrics(two_jobs(), &out);
  EXPECT_TRUE(absl::StrContains(out,
                                "# HELP troupe_train_loss Mean training loss.\n"
                                "# TYPE troupe_train_loss gauge\n"
                                "troupe_train_loss{job=\"3\"} 1.25\n"
                                "troupe_train_loss{job=\"9\"} NaN\n"))
      << out;
  EXPECT_TRUE(absl::StrContains(out, "# TYPE troupe_train_recoveries_total counter\n")) << out;
  EXPECT_TRUE(absl::StrContains(
      out,
      "troupe_train_memory_bytes{job=\"3\",rank=\"d1.p0.t0\",category=\"gradients\"} "
      "123456789012\n"))
      << out;
  // Malformed series are left out.
  EXPECT_FALSE(absl::StrContains(out, "bad name")) << out;
  EXPECT_FALSE(absl::StrContains(out, "step_seconds")) << out;
  // And the cluster's page carries them.
  EXPECT_TRUE(absl::StrContains(render_metrics(two_jobs()), "troupe_train_tokens_per_second"));
}

TEST(JobMetricsRenderTest, StatusShowsEachJobsStepLossAndThroughput) {
  const std::string status = render_status(two_jobs());
  EXPECT_TRUE(absl::StrContains(status, "step 12, loss 1.2500, 45.2k tokens/s")) << status;
}

// Memory in people's units in `troupe status`, not a count of bytes.
TEST(JobMetricsRenderTest, StatusShowsMemoryInHumanUnits) {
  ClusterStatus s;
  NodeStatus n;
  n.info.index = 1;
  n.info.name = "worker";
  n.info.resources = "CPU=2,memory=1234567890";
  n.available = "CPU=1,memory=234567890";
  s.nodes.push_back(n);
  const std::string out = render_status(s);
  EXPECT_TRUE(absl::StrContains(out, "CPU 1/2, memory 954 MiB/1.15 GiB")) << out;
}

// `troupe status` a person can read: each living actor's whole name (a training job's
// JOB/kind/d0.p0.t0), the dead counted by why rather than listed.
TEST(JobMetricsRenderTest, StatusNamesActorsInFullAndCountsTheDead) {
  ClusterStatus s;
  s.actors.push_back({.id = 1,
                      .type = "PipelineStageActor",
                      .name = "train-13441-84345/stage/d1.p0.t0",
                      .node = 2,
                      .state = ActorState::kAlive,
                      .job = 3});
  s.actors.push_back({.id = 2,
                      .type = "ParamShardActor",
                      .name = "train-13441-84345/shard/d1.p0.t0",
                      .node = 2,
                      .state = ActorState::kRestarting,
                      .restarts = 1,
                      .death_reason = "node 2 is dead",
                      .job = 3});
  for (uint64_t i = 0; i < 30; ++i) {
    s.actors.push_back({.id = 10 + i,
                        .type = "Probe",
                        .name = absl::StrCat("old-", i),
                        .state = ActorState::kDead,
                        .death_reason = i < 20 ? "its job 2 ended (finished)" : "node 1 is dead"});
  }
  const std::string out = render_status(s);
  EXPECT_TRUE(absl::StrContains(out, "train-13441-84345/stage/d1.p0.t0\n")) << out;
  EXPECT_TRUE(absl::StrContains(out, "train-13441-84345/shard/d1.p0.t0  (node 2 is dead)")) << out;
  EXPECT_TRUE(absl::StrContains(out,
                                "  30 dead:\n    20  its job 2 ended (finished)\n"
                                "    10  node 1 is dead\n"))
      << out;
  EXPECT_FALSE(absl::StrContains(out, "old-")) << "the dead are counted, not listed";
}

}  // namespace
}  // namespace troupe::cluster
