// What a training job reports to the head (trainers/job_metrics.h): each step's values with the
// counters and events of what happened since, help once, per-rank values at their interval.
#include "trainers/job_metrics.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace troupe::trainers {
namespace {

std::optional<double> find(const cluster::MetricsReport& r, const std::string& name,
                           const std::string& labels = "") {
  for (const cluster::MetricPoint& p : r.points) {
    if (p.name == name && p.labels == labels) return p.value;
  }
  return std::nullopt;
}

StepOutcome step(int64_t k) {
  StepOutcome s;
  s.step = k;
  s.applied = true;
  s.loss = 2.0;
  s.lr = 0.01f;
  s.dp = 2;
  s.tokens = 1000;
  s.step_ms = 500;
  s.compute_ms = 300;
  RankUsage r;
  r.at = {.d = 1, .p = 0, .t = 0};
  r.memory.parameters = 4096;
  r.sent.allreduce = 123;
  s.ranks = {r};
  return s;
}

TEST(JobMetricsReporterTest, AStepsValuesCountersAndEvents) {
  std::vector<cluster::MetricsReport> sent;
  JobMetricsReporter reporter([&](cluster::MetricsReport r) { sent.push_back(std::move(r)); },
                              FlopsModel{.flops_per_token = 100, .peak_per_rank = 1e6},
                              /*rank_every=*/10);
  reporter.on_step(step(1));
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].step, 1);
  EXPECT_EQ(find(sent[0], "loss"), 2.0);
  EXPECT_EQ(find(sent[0], "tokens_per_second"), 2000.0);
  EXPECT_EQ(find(sent[0], "model_flops_per_second"), 200000.0);
  EXPECT_EQ(find(sent[0], "mfu"), 0.1);  // 2e5 FLOP/s over 2 ranks of 1e6
  EXPECT_EQ(find(sent[0], "step_seconds", "part=\"compute\""), 0.3);
  EXPECT_EQ(find(sent[0], "memory_bytes", "rank=\"d1.p0.t0\",category=\"parameters\""), 4096);
  EXPECT_EQ(find(sent[0], "sent_bytes", "rank=\"d1.p0.t0\",collective=\"allreduce\""), 123);
  EXPECT_EQ(find(sent[0], "recoveries_total"), 0.0);
  EXPECT_FALSE(sent[0].help.empty());

  RecoveryReport recovery;
  recovery.step = 2;
  recovery.failure = "a rank was lost";
  recovery.steps_lost = 1;
  recovery.total_ms = 1500;
  reporter.on_recovery(recovery);
  CheckpointEvent checkpoint;
  checkpoint.step = 2;
  checkpoint.step_dir = "ckpt/step-2";
  checkpoint.bytes = 1 << 20;
  checkpoint.total_ms = 250;
  reporter.on_checkpoint(checkpoint);
  EXPECT_EQ(sent.size(), 1u) << "kept for the next step's report";
  StepOutcome skipped = step(2);
  skipped.applied = false;
  reporter.on_step(skipped);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_TRUE(sent[1].help.empty()) << "help goes once";
  EXPECT_EQ(find(sent[1], "recoveries_total"), 1.0);
  EXPECT_EQ(find(sent[1], "recovery_seconds_total"), 1.5);
  EXPECT_EQ(find(sent[1], "steps_lost_total"), 1.0);
  EXPECT_EQ(find(sent[1], "checkpoints_total"), 1.0);
  EXPECT_EQ(find(sent[1], "checkpoint_seconds"), 0.25);
  EXPECT_EQ(find(sent[1], "skipped_steps_total"), 1.0);
  EXPECT_FALSE(find(sent[1], "memory_bytes", "rank=\"d1.p0.t0\",category=\"parameters\""))
      << "per-rank values every 10th step only";
  ASSERT_EQ(sent[1].events.size(), 3u);
  EXPECT_NE(sent[1].events[0].find("recovery: "), std::string::npos);
  EXPECT_NE(sent[1].events[1].find("checkpoint of step 2"), std::string::npos);
  EXPECT_NE(sent[1].events[2].find("skipped"), std::string::npos);

  reporter.on_step(step(10));
  EXPECT_TRUE(find(sent[2], "memory_bytes", "rank=\"d1.p0.t0\",category=\"parameters\""));
  actors::ValidationResult v;
  v.loss_sum = 30;
  v.tokens = 10;
  reporter.on_validation(10, v);
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(find(sent[3], "validation_loss"), 3.0);
  EXPECT_FALSE(find(sent[3], "validation_bits_per_byte")) << "the dataset knows no text bytes";
}

}  // namespace
}  // namespace troupe::trainers
