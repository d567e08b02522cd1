// Recovery from lost workers on a real local cluster: a head, worker
// processes of the troupe executable (one of them a spare) and this test
// process as the driver. A worker hosting a rank is SIGKILLed - between
// steps, at seeded random moments inside steps, twice in one run - and the
// job goes on: the lost rank's actors are restarted on the spare (or on a
// node that joins), take a surviving replica's state, and the aborted step
// runs again. The final weights are bitwise those of the same run without
// failures, and every committed step trained on the same samples. Without a
// node to replace the lost one the job ends with a clear error; a ZeRO
// partition, which no survivor holds, comes back from the checkpoint. A mesh
// dp x pp x tp recovers a lost pipeline stage and its tp slices the same way.
#include <gtest/gtest.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/cluster.h"
#include "core/cluster/local_cluster.h"
#include "tests/cluster/silent_flood.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"
#include "trainers/recovery.h"

namespace troupe::trainers {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 10;

TrainConfig config_for(int zero_stage, const std::string& checkpoint_dir = "") {
  TrainConfig c;
  c.zero.stage = zero_stage;
  c.parallel.dp = 2;
  c.gradient_accumulation_steps = 2;
  c.micro_batch_size = 3;
  c.train_batch_size = 12;
  c.model = nn::GPTConfig{.max_seq_len = 12,
                          .vocab_size = 64,
                          .padded_vocab_size = 64,
                          .num_layers = 3,
                          .num_heads = 2,
                          .channels = 32};
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 400, .seed = 5};
  c.optimizer.type = OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.lr_schedule = *nn::LrSchedule::warmup_cosine(
      {.base_lr = 3e-3f, .total_num_steps = kSteps, .warmup_num_steps = 2});
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 5000;
  c.zero.stage3_param_persistence_threshold = 50;
  c.zero.stage3_prefetch_bucket_size = 8000;
  c.training.seed = 33;
  c.fault_tolerance = {.enabled = true,
                       .spare_nodes = 1,
                       .max_failures = 4,
                       .wait_for_node_s = 20,
                       .step_timeout_s = 60};
  if (!checkpoint_dir.empty()) {
    c.checkpoint = {.dir = checkpoint_dir, .interval_steps = 2, .keep = 2, .async = false};
  }
  return c;
}

// A kill: before step `step` runs, the worker of coordinate (rank, p, t) is
// sent SIGKILL after `delay`.
struct Kill {
  int64_t step = 0;
  int rank = 1;  // d
  int p = 0;
  int t = 0;
  absl::Duration delay = absl::ZeroDuration();
  int signal = SIGKILL;  // SIGSTOP: a hung worker
  // Before the step, and the step waits until the head has restarted the
  // rank's actors: its first calls reach replacements not yet restored.
  bool until_restarted = false;
  // With the worker, and by the same signal sent right after it: an idle
  // worker (a spare, where the lost rank's replacement would go).
  bool with_spare = false;
  // Before the step starts, on the test's thread, without waiting for
  // anything: the step is the first to meet the loss. (A kill from a thread
  // beside the step can land after it on a loaded machine, and the next
  // step meets it instead.)
  bool before_step = false;
};

struct RunLog {
  std::vector<StepOutcome> outcomes;  // of every step run, first_step..kSteps
  int64_t first_step = 1;             // after a resume, the checkpoint's step + 1
  std::vector<float> params;
  std::vector<RecoveryReport> recoveries;
  double lost_ms = 0;  // RecoveringStepper::lost_ms
  std::vector<CheckpointEvent> checkpoints_failed;
  absl::Status status;  // the first step that failed for good, if any
  // After such a failure, with a checkpoint directory: the last checkpoint,
  // saved without the members no node replaced.
  std::optional<CheckpointEvent> last_checkpoint;
};

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');  // a parameterised test's
    dir_ =
        (fs::temp_directory_path() / ("troupe-recovery-" + std::to_string(::getpid()) + "-" + name))
            .string();
    fs::remove_all(dir_);
  }
  void TearDown() override {
    driver_.reset();
    local_.reset();
    fs::remove_all(dir_);
  }

  // `workers` worker processes with `resources` each: CPU=1 holds one rank,
  // CPU=2 two (a lost rank's replacement may then go beside a survivor).
  void start_cluster(int workers, const std::string& resources = "CPU=1") {
    auto local = cluster::LocalCluster::start({.workers = workers,
                                               .default_resources = resources,
                                               .troupe_binary = TROUPE_BINARY,
                                               .echo_output = getenv("ECHO") != nullptr});
    ASSERT_TRUE(local.ok()) << local.status();
    local_ = *std::move(local);
    auto driver = Cluster::connect(local_->client_options());
    ASSERT_TRUE(driver.ok()) << driver.status();
    driver_ = *std::move(driver);
  }

  // Until the head shows each of `actors` alive again after a restart
  // (bounded: a failure after 60 s).
  void await_restarted(const std::vector<ActorId>& actors) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    for (; absl::Now() < deadline; absl::SleepFor(absl::Milliseconds(20))) {
      absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
      if (!status.ok()) continue;  // the head is busy with the loss: asked again
      size_t restarted = 0;
      for (const cluster::ActorStatus& a : status->actors) {
        const bool ours =
            std::any_of(actors.begin(), actors.end(), [&](ActorId id) { return id.value == a.id; });
        if (ours && a.restarts > 0 && a.state == cluster::ActorState::kAlive) ++restarted;
      }
      if (restarted == actors.size()) return;
    }
    ADD_FAILURE() << "the head did not restart the lost rank's actors within 60 s";
  }

  // The worker (by LocalCluster position) that hosts the stage at `at`.
  int worker_of(Trainer& trainer, const actors::Coordinate& at) {
    absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return -1;
    const uint64_t stage = trainer.repair()->actors_at(at)[1].value;
    for (const cluster::ActorStatus& a : status->actors) {
      if (a.id != stage) continue;
      for (int i = 0; i < local_->num_workers(); ++i) {
        if (local_->worker_node(i) == a.node) return i;
      }
    }
    ADD_FAILURE() << "no worker hosts " << actors::to_string(at);
    return -1;
  }

  // A running worker that hosts none of the cluster's live actors (a spare);
  // -1 if there is none.
  int idle_worker() {
    absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return -1;
    std::set<uint32_t> busy;
    for (const cluster::ActorStatus& a : status->actors) {
      if (a.state == cluster::ActorState::kAlive) busy.insert(a.node);
    }
    for (int i = 0; i < local_->num_workers(); ++i) {
      if (local_->worker_running(i) && !busy.contains(local_->worker_node(i))) return i;
    }
    ADD_FAILURE() << "no idle worker";
    return -1;
  }

  // Runs kSteps steps of `config` through a RecoveringStepper, carrying out
  // `kills` on the way; `on_recovery` runs after each recovery. `resume`:
  // from the latest checkpoint of config.checkpoint.dir.
  RunLog run(const TrainConfig& config, std::vector<Kill> kills = {},
             const std::function<void(const RecoveryReport&)>& on_recovery = nullptr,
             bool resume = false) {
    RunLog result;
    auto trainer = start_trainer(*driver_, config, "recovery-" + std::to_string(++jobs_), 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) {
      result.status = trainer.status();
      return result;
    }
    std::optional<Checkpointer> checkpoints;
    if (!config.checkpoint.dir.empty()) {
      checkpoints.emplace((*trainer)->controller(),
                          job_record(config, (*trainer)->data_info().samples_per_epoch),
                          config.checkpoint);
    }
    RecoveringStepper stepper(**trainer, checkpoints ? &*checkpoints : nullptr,
                              config.fault_tolerance);
    if (resume) {
      absl::StatusOr<LoadedCheckpoint> loaded = checkpoints->load();
      EXPECT_TRUE(loaded.ok()) << loaded.status();
      if (!loaded.ok()) {
        result.status = loaded.status();
        return result;
      }
      result.first_step = loaded->step + 1;
    }
    for (int64_t k = result.first_step; k <= kSteps; ++k) {
      std::vector<std::thread> killers;
      for (const Kill& kill : kills) {
        if (kill.step != k) continue;
        const actors::Coordinate at{.d = kill.rank, .p = kill.p, .t = kill.t};
        const int victim = worker_of(**trainer, at);
        if (victim < 0) continue;
        const int spare = kill.with_spare ? idle_worker() : -1;
        if (kill.with_spare) {
          // In one go, as `kill -9 A B` does: the head may have chosen the
          // spare for the lost rank's bundle before it finds the spare lost.
          local_->kill_worker(victim, kill.signal);
          if (spare >= 0) local_->kill_worker(spare, kill.signal);
          continue;
        }
        if (kill.until_restarted) {
          local_->kill_worker(victim, kill.signal);
          await_restarted((*trainer)->repair()->actors_at(at));
          continue;
        }
        if (kill.before_step) {
          local_->kill_worker(victim, kill.signal);
          continue;
        }
        killers.emplace_back([this, victim, kill] {
          absl::SleepFor(kill.delay);
          local_->kill_worker(victim, kill.signal);
        });
      }
      absl::StatusOr<StepOutcome> outcome = stepper.step(k, [&](const RecoveryReport& r) {
        std::printf("[ recovery ] %s\n", r.summary().c_str());
        if (on_recovery) on_recovery(r);
      });
      for (std::thread& t : killers)
        t.join();
      if (!outcome.ok()) {
        result.status = outcome.status();
        if (checkpoints) {
          std::vector<CheckpointEvent> saved = checkpoints->save_now(stepper.unrecovered());
          if (!saved.empty()) result.last_checkpoint = saved.back();
        }
        break;
      }
      EXPECT_EQ(outcome->step, k);
      result.outcomes.push_back(*outcome);
      if (checkpoints) {
        for (const CheckpointEvent& e : checkpoints->after_step(k)) {
          if (!e.status.ok()) result.checkpoints_failed.push_back(e);
        }
      }
    }
    if (checkpoints) {
      for (const CheckpointEvent& e : checkpoints->finish()) {
        if (!e.status.ok()) result.checkpoints_failed.push_back(e);
      }
    }
    result.recoveries = stepper.recoveries();
    result.lost_ms = stepper.lost_ms();
    if (result.status.ok()) {
      auto params = (*trainer)->master_params();
      EXPECT_TRUE(params.ok()) << params.status();
      if (params.ok()) result.params = *std::move(params);
    }
    (*trainer)->stop().IgnoreError();
    return result;
  }

  // The run with failures trained exactly as the one without: the same
  // samples, losses and norms at every step, and bitwise the same weights.
  // (A resumed run from its first step on.)
  static void expect_same_run(const RunLog& failed, const RunLog& whole) {
    ASSERT_TRUE(failed.status.ok()) << failed.status;
    const auto skipped = static_cast<size_t>(failed.first_step - whole.first_step);
    ASSERT_EQ(failed.outcomes.size() + skipped, whole.outcomes.size());
    std::set<int64_t> seen;
    for (size_t k = skipped; k < whole.outcomes.size(); ++k) {
      const StepOutcome& a = failed.outcomes[k - skipped];
      const StepOutcome& b = whole.outcomes[k];
      EXPECT_EQ(a.sample_ids, b.sample_ids) << "step " << k + 1;
      EXPECT_EQ(a.loss, b.loss) << "step " << k + 1;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "step " << k + 1;
      EXPECT_EQ(a.lr, b.lr) << "step " << k + 1;
      for (int64_t id : a.sample_ids)
        EXPECT_TRUE(seen.insert(id).second) << "sample " << id << " twice (step " << k + 1 << ")";
    }
    ASSERT_EQ(failed.params.size(), whole.params.size());
    EXPECT_EQ(
        std::memcmp(failed.params.data(), whole.params.data(), whole.params.size() * sizeof(float)),
        0)
        << "the weights differ from the run without failures";
  }

  // `failed` ended for want of a node for d1 after its survivors saved the
  // last checkpoint, of `step`: given a node, a resume from it ends as
  // `whole`, the run without failures.
  void expect_last_checkpoint_resumes(const TrainConfig& config, const RunLog& failed, int64_t step,
                                      const RunLog& whole) {
    ASSERT_TRUE(absl::StrContains(failed.status.message(), "no node took the place of d1.p0.t0"))
        << failed.status;
    ASSERT_TRUE(failed.last_checkpoint.has_value());
    ASSERT_TRUE(failed.last_checkpoint->status.ok()) << failed.last_checkpoint->status;
    EXPECT_EQ(failed.last_checkpoint->step, step);
    absl::StatusOr<int> added = local_->add_worker("CPU=1");
    ASSERT_TRUE(added.ok()) << added.status();
    const RunLog resumed = run(config, {}, nullptr, /*resume=*/true);
    EXPECT_EQ(resumed.first_step, step + 1);
    expect_same_run(resumed, whole);
  }

  std::string dir_;
  std::unique_ptr<cluster::LocalCluster> local_;
  std::unique_ptr<Cluster> driver_;
  int jobs_ = 0;
};

TEST_F(RecoveryTest, DdpLosesAWorkerBetweenStepsAndEndsBitwiseEqual) {
  start_cluster(3);  // two ranks and a spare
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  const RunLog failed = run(config, {{.step = 4, .rank = 1}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(r.steps_lost, 1);
  ASSERT_EQ(r.lost.size(), 1u);
  EXPECT_EQ(r.lost[0].at.d, 1);
  ASSERT_EQ(r.restored.size(), 1u);
  EXPECT_TRUE(absl::StrContains(r.restored[0], "d1.p0.t0 restored from d0.p0.t0")) << r.restored[0];
  EXPECT_FALSE(r.checkpoint_step.has_value());
}

// The Llama model (its own head, grouped-query attention) under ZeRO-2: a rank SIGKILLed in the
// middle of a step is replaced, its partition restored from its buddy, and the run ends
// bitwise as the one without failures.
TEST_F(RecoveryTest, ALlamaRankLostMidStepEndsBitwiseEqual) {
  start_cluster(3);  // two ranks and a spare
  TrainConfig config = config_for(2);
  config.model = nn::LlamaConfig{.vocab_size = 64,
                                 .hidden_size = 32,
                                 .intermediate_size = 48,
                                 .num_hidden_layers = 3,
                                 .num_attention_heads = 4,
                                 .num_key_value_heads = 2,
                                 .max_position_embeddings = 12,
                                 .rms_norm_eps = 1e-5,
                                 .padded_vocab_size = 64};
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  double step_ms = 0;
  for (const StepOutcome& o : whole.outcomes)
    step_ms += o.step_ms / static_cast<double>(whole.outcomes.size());
  const RunLog failed =
      run(config, {{.step = 5, .rank = 1, .delay = absl::Milliseconds(0.5 * step_ms)}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  EXPECT_LE(failed.recoveries[0].steps_lost, 1) << failed.recoveries[0].summary();
  EXPECT_FALSE(failed.recoveries[0].checkpoint_step.has_value()) << failed.recoveries[0].summary();
}

// The head restarts a lost rank's actors as soon as it finds the node lost;
// the next step's calls may reach them before the controller knows of the
// loss. They answer that they hold nothing (a stage not set up, a shard with
// no weights): the controller asks the head, which says they were restarted,
// and the job recovers instead of ending on that answer.
TEST_F(RecoveryTest, CallsThatReachAReplacementNotYetRestoredAreALoss) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  const RunLog failed = run(config, {{.step = 4, .rank = 0, .until_restarted = true}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_EQ(r.step, 4);
  ASSERT_EQ(r.lost.size(), 1u);
  EXPECT_EQ(r.lost[0].at.d, 0);
  EXPECT_TRUE(absl::StrContains(r.failure, "not yet restored")) << r.failure;
}

TEST_F(RecoveryTest, DdpLosesWorkersAtSeededMomentsTwiceInARow) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  double step_ms = 0;
  for (const StepOutcome& o : whole.outcomes)
    step_ms += o.step_ms / static_cast<double>(whole.outcomes.size());
  // Moments anywhere in a step (forward, backward, the allreduce, the
  // commit) or just after it (then the next step finds the loss); rank 0,
  // then rank 1 twice - once the replacement of the loss before it.
  std::mt19937 rng(20261202);
  std::uniform_real_distribution<double> within(0, 1.5 * step_ms);
  std::vector<Kill> kills = {{.step = 3, .rank = 0, .delay = absl::Milliseconds(within(rng))},
                             {.step = 5, .rank = 1, .delay = absl::Milliseconds(within(rng))},
                             {.step = 7, .rank = 1, .delay = absl::Milliseconds(within(rng))}};
  // Each recovery takes the spare: a new one joins for the next.
  const RunLog failed = run(config, kills, [&](const RecoveryReport&) {
    absl::StatusOr<int> added = local_->add_worker("CPU=1");
    EXPECT_TRUE(added.ok()) << added.status();
  });
  expect_same_run(failed, whole);
  EXPECT_EQ(failed.recoveries.size(), 3u);
  for (const RecoveryReport& r : failed.recoveries) {
    EXPECT_LE(r.steps_lost, 1) << r.summary();
    EXPECT_FALSE(r.checkpoint_step.has_value()) << r.summary();
  }
}

TEST_F(RecoveryTest, AHungWorkerIsTreatedAsLost) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  // SIGSTOP: the process stops heartbeating and answering, but its
  // connections stay open; the head's detector declares it dead.
  const RunLog failed = run(config, {{.step = 6, .rank = 1, .signal = SIGSTOP}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  EXPECT_TRUE(absl::StrContains(failed.recoveries[0].summary(), "no heartbeat"))
      << failed.recoveries[0].summary();
}

// The other kind of hang: the stage's compute thread stops (a kernel or a lock
// that never returns) while the process goes on heartbeating. The controller
// finds no answer within step_timeout_s, tells the rank that hung from the one
// waiting for it in the allreduce, and has the head fence its node.
TEST_F(RecoveryTest, AComputeThreadStuckWhileHeartbeatsGoOnIsFencedAndReplaced) {
  fs::create_directories(dir_);
  const std::string armed = dir_ + "/armed";
  ::setenv("TROUPE_FAILPOINT", absl::StrCat("backward:d1.p0.t0:5:", armed).c_str(), 1);
  ::setenv("TROUPE_FAILPOINT_ACTION", "hang", 1);
  start_cluster(3);
  ::unsetenv("TROUPE_FAILPOINT");
  ::unsetenv("TROUPE_FAILPOINT_ACTION");
  TrainConfig config = config_for(0);
  config.fault_tolerance.step_timeout_s = 3;
  const RunLog whole = run(config);
  std::ofstream(armed).put('1');
  const RunLog failed = run(config);
  EXPECT_FALSE(fs::exists(armed)) << "the failpoint did not fire";
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  ASSERT_EQ(r.lost.size(), 1u) << r.summary();
  EXPECT_EQ(r.lost[0].at.d, 1) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "fenced by")) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "which d0.p0.t0 issued and waits in")) << r.summary();
  EXPECT_EQ(r.steps_lost, 1) << r.summary();
  // The fenced worker's process exits (its stuck thread never returns).
  int exited = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (exited == 0 && absl::Now() < give_up) {
    for (int i = 0; i < local_->num_workers(); ++i)
      exited += local_->worker_running(i) ? 0 : 1;
    if (exited == 0) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(exited, 1);
}

TEST_F(RecoveryTest, TrainingGoesOnWhileTheHeadIsDownAndAfterItRestarts) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  // The head dies before step 3 and is back before step 7: calls and the
  // allreduce are peer to peer, so the steps between need no head.
  RunLog failed;
  {
    auto trainer = DataParallelTrainer::start(*driver_, config, "head-restart", 1);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    RecoveringStepper stepper(**trainer, nullptr, config.fault_tolerance);
    for (int64_t k = 1; k <= kSteps; ++k) {
      if (k == 3) local_->kill_head(SIGKILL);
      if (k == 7) {
        ASSERT_TRUE(local_->restart_head().ok());
      }
      absl::StatusOr<StepOutcome> outcome = stepper.step(k, nullptr);
      ASSERT_TRUE(outcome.ok()) << "step " << k << ": " << outcome.status();
      failed.outcomes.push_back(*outcome);
    }
    // The workers rejoined the restarted head: the job's actors are known again.
    absl::StatusOr<std::vector<float>> params;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    do {
      params = (*trainer)->master_params();
    } while (!params.ok() && absl::Now() < give_up);
    ASSERT_TRUE(params.ok()) << params.status();
    failed.params = *std::move(params);
    EXPECT_TRUE(stepper.recoveries().empty());
    (*trainer)->stop().IgnoreError();
  }
  expect_same_run(failed, whole);
}

// A worker lost while the head is down: the step in flight fails, the
// controller waits for the head, and the restarted head - which knows only
// the actors of the nodes that rejoin it - has nothing to restart the lost
// rank's actors from. New actors take the rank on the spare, restored from
// the surviving replica, and the run ends as the one without failures.
TEST_F(RecoveryTest, AWorkerLostWhileTheHeadIsDownIsReplacedOnceItIsBack) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  RunLog failed;
  {
    auto trainer = DataParallelTrainer::start(*driver_, config, "lost-while-head-down", 1);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    RecoveringStepper stepper(**trainer, nullptr, config.fault_tolerance);
    const int victim = worker_of(**trainer, {.d = 1});
    ASSERT_GE(victim, 0);
    // The head is started again 2 s after the worker's loss, by a thread that
    // lives on until the end, as the head does (a child of the thread that
    // started it: LocalCluster).
    std::atomic<bool> done{false};
    std::thread restarter;
    for (int64_t k = 1; k <= kSteps; ++k) {
      if (k == 3) local_->kill_head(SIGKILL);
      if (k == 5) {
        local_->kill_worker(victim, SIGKILL);
        restarter = std::thread([this, &done] {
          absl::SleepFor(absl::Seconds(2));
          EXPECT_TRUE(local_->restart_head().ok());
          while (!done.load())
            absl::SleepFor(absl::Milliseconds(20));
        });
      }
      absl::StatusOr<StepOutcome> outcome = stepper.step(k, [](const RecoveryReport& r) {
        std::printf("[ recovery ] %s\n", r.summary().c_str());
      });
      if (!outcome.ok()) {
        done.store(true);
        if (restarter.joinable()) restarter.join();
      }
      ASSERT_TRUE(outcome.ok()) << "step " << k << ": " << outcome.status();
      failed.outcomes.push_back(*outcome);
    }
    absl::StatusOr<std::vector<float>> params = (*trainer)->master_params();
    ASSERT_TRUE(params.ok()) << params.status();
    failed.params = *std::move(params);
    ASSERT_EQ(stepper.recoveries().size(), 1u);
    const RecoveryReport& r = stepper.recoveries()[0];
    EXPECT_EQ(r.step, 5);
    EXPECT_TRUE(absl::StrContains(r.summary(), "lost while the head was down")) << r.summary();
    EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p0.t0 restored from d0.p0.t0")) << r.summary();
    (*trainer)->stop().IgnoreError();
    driver_.reset();  // before the head goes with its thread
    local_.reset();
    done.store(true);
    restarter.join();
  }
  expect_same_run(failed, whole);
}

TEST_F(RecoveryTest, WithoutASpareAReplacementWaitsForANodeThatJoins) {
  start_cluster(2);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  // A worker joins a second after one is lost. The thread that starts it
  // lives on until the end, as the worker does (LocalCluster::add_worker).
  std::atomic<bool> done{false};
  std::thread joiner([this, &done] {
    const absl::Time give_up = absl::Now() + absl::Seconds(120);
    auto all_running = [this] {
      for (int i = 0; i < local_->num_workers(); ++i) {
        if (!local_->worker_running(i)) return false;
      }
      return true;
    };
    while (all_running() && absl::Now() < give_up)
      absl::SleepFor(absl::Milliseconds(20));
    absl::SleepFor(absl::Seconds(1));
    absl::StatusOr<int> added = local_->add_worker("CPU=1");
    EXPECT_TRUE(added.ok()) << added.status();
    while (!done.load())
      absl::SleepFor(absl::Milliseconds(20));
  });
  const RunLog failed = run(config, {{.step = 5, .rank = 0}});
  done.store(true);
  joiner.join();
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  // (The survivor's node has no room: the replacement can only be on the
  // node that joined.)
}

TEST_F(RecoveryTest, AReplacementGoesWhereThereIsRoomBesideASurvivor) {
  start_cluster(2, "CPU=2");  // no spare, but room for two ranks on a node
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  const RunLog failed = run(config, {{.step = 3, .rank = 1}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
}

// What a probe of the running system found: also `ctest -L reliability`.
class RecoveryReliabilityTest : public RecoveryTest {};

// The replacement's node is lost too: a rank's worker and the spare are
// killed in one command. The head may have moved the rank's bundle to the
// spare (and begun restarting the actors there) before it found the spare
// lost; the placement starts again on what is alive - beside the survivor,
// which has room - and the run ends as the one without failures.
TEST_F(RecoveryReliabilityTest, WhenTheSpareIsLostWithTheRankTheReplacementGoesWhereThereIsRoom) {
  start_cluster(3, "CPU=2");  // two ranks, a spare; room for two ranks on a node
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  for (int rank : {1, 0}) {
    const RunLog failed = run(config, {{.step = 3 + rank, .rank = rank, .with_spare = true}});
    expect_same_run(failed, whole);
    ASSERT_EQ(failed.recoveries.size(), 1u);
    const RecoveryReport& r = failed.recoveries[0];
    ASSERT_EQ(r.lost.size(), 1u) << r.summary();
    EXPECT_EQ(r.lost[0].at.d, rank) << r.summary();
    EXPECT_EQ(r.steps_lost, 1) << r.summary();
    // One worker is left: the next run finds a rank's place and a spare again.
    for (int i = 0; i < 2; ++i) {
      absl::StatusOr<int> added = local_->add_worker("CPU=2");
      ASSERT_TRUE(added.ok()) << added.status();
    }
  }
}

// Every listener of the cluster - the head's, each worker's data plane and
// collective groups', the driver's - flooded with peers that connect and say
// nothing, more than a listener holds for unauthenticated peers, while a
// worker is lost: the recovery's connections (to the spare, the groups formed
// again) get through, no healthy node is declared dead, and the run ends
// bitwise equal to the one without failures. Before, a listener past its cap
// closed every new connection: the spare was declared dead ("connection
// closed during the handshake") and the job failed.
TEST_F(RecoveryReliabilityTest, ARecoveryDuringAFloodOfEveryListenerEndsBitwiseEqual) {
  start_cluster(3);
  const TrainConfig config = config_for(0);
  const RunLog whole = run(config);
  std::vector<pid_t> pids = {local_->head_pid(), ::getpid()};
  for (int i = 0; i < local_->num_workers(); ++i)
    pids.push_back(local_->worker_pid(i));
  cluster::testing::SilentFlood flood(pids, 70);
  ASSERT_TRUE(flood.wait_flooding(2 + local_->num_workers(), absl::Seconds(30)));
  const RunLog failed = run(config, {{.step = 4, .rank = 1}});
  const int listeners = flood.listeners();
  const int64_t opened = flood.opened();
  flood.stop();
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  EXPECT_GE(listeners, 2 + local_->num_workers());
  // The listeners kept closing silent peers, and the flood kept coming back.
  EXPECT_GT(opened, int64_t{70} * listeners);
  std::printf("[ flood ] %d listeners, %lld silent connections opened\n", listeners,
              static_cast<long long>(opened));
  // No node but the one killed was lost.
  absl::StatusOr<cluster::ClusterStatus> status = driver_->status();
  ASSERT_TRUE(status.ok()) << status.status();
  int dead = 0;
  for (const cluster::NodeStatus& n : status->nodes)
    dead += n.state == cluster::NodeState::kDead ? 1 : 0;
  EXPECT_EQ(dead, 1);
}

// The head is lost, and 2 s later a rank's worker: nothing can replace the
// rank while the head is down. The job says so at once (a note within 5 s),
// waits for the head no longer than wait_for_node_s, counts no recovery it
// did not make toward max_failures, and the survivors save a last checkpoint
// from which --resume, on a cluster with a head again, continues as the run
// without failures. (Before, nothing was said for two minutes, calls to the
// lost rank each waited 30 s for a head that could not answer, every wait
// for the head counted as a recovery until max_failures ended the job, and
// by then the survivors had given up on the head: no checkpoint.)
TEST_F(RecoveryReliabilityTest, AWorkerLostWhileTheHeadStaysDownEndsInTimeWithALastCheckpoint) {
  start_cluster(3);
  TrainConfig config = config_for(0, dir_ + "/ckpt");
  config.checkpoint.interval_steps = 0;  // the last checkpoint only
  config.fault_tolerance.wait_for_node_s = 10;
  config.fault_tolerance.max_failures = 3;
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  absl::Status failure;
  std::vector<CheckpointEvent> saved;
  std::vector<std::pair<absl::Duration, std::string>> notes;  // since the loss
  absl::Time lost_at = absl::InfiniteFuture();
  absl::Duration ended_after = absl::InfiniteDuration();
  {
    auto trainer = start_trainer(*driver_, config, "head-then-worker", 1);
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    Checkpointer checkpoints((*trainer)->controller(),
                             job_record(config, (*trainer)->data_info().samples_per_epoch),
                             config.checkpoint);
    RecoveringStepper stepper(**trainer, &checkpoints, config.fault_tolerance);
    stepper.set_on_note([&](const std::string& note) {
      notes.emplace_back(absl::Now() - lost_at, note);
      std::printf("[ note ] %s\n", note.c_str());
    });
    const int victim = worker_of(**trainer, {.d = 1});
    ASSERT_GE(victim, 0);
    absl::Time head_lost = absl::InfiniteFuture();
    for (int64_t k = 1; k <= kSteps; ++k) {
      // The head goes before step 3 (steps 3 and 4 run without it), the
      // worker of d1 2 s later, before step 5.
      if (k == 3) {
        local_->kill_head(SIGKILL);
        head_lost = absl::Now();
      }
      if (k == 5) {
        absl::SleepFor(head_lost + absl::Seconds(2) - absl::Now());
        local_->kill_worker(victim, SIGKILL);
        lost_at = absl::Now();
      }
      absl::StatusOr<StepOutcome> outcome = stepper.step(k, nullptr);
      if (!outcome.ok()) {
        failure = outcome.status();
        // What troupe train does then (save_after_failure).
        saved = checkpoints.save_now(stepper.unrecovered());
        ended_after = absl::Now() - lost_at;
        EXPECT_EQ(k, 5) << failure;
        break;
      }
    }
    ASSERT_FALSE(failure.ok()) << "the job went on without a head to replace d1";
    EXPECT_TRUE(stepper.recoveries().empty());
    EXPECT_EQ(stepper.failures(), 0);
    ASSERT_EQ(stepper.unrecovered().size(), 1u) << failure;
    EXPECT_EQ(stepper.unrecovered()[0].d, 1);
    (*trainer)->stop().IgnoreError();
  }
  std::printf("[ ended ] %s after the loss: %s\n", absl::FormatDuration(ended_after).c_str(),
              std::string(failure.message()).c_str());
  EXPECT_FALSE(absl::StrContains(failure.message(), "max_failures")) << failure;
  EXPECT_TRUE(absl::StrContains(failure.message(), "wait_for_node_s 10 s")) << failure;
  EXPECT_LE(ended_after, absl::Seconds(config.fault_tolerance.wait_for_node_s + 2)) << failure;
  ASSERT_FALSE(notes.empty()) << "nothing was said while the job waited for the head";
  EXPECT_LE(notes[0].first, absl::Seconds(5)) << notes[0].second;
  EXPECT_TRUE(absl::StrContains(notes[0].second, "head")) << notes[0].second;
  ASSERT_FALSE(saved.empty());
  ASSERT_TRUE(saved.back().status.ok()) << saved.back().status;
  EXPECT_EQ(saved.back().step, 4);
  // A cluster with a head again (a new one): --resume continues from it.
  driver_.reset();
  local_.reset();
  start_cluster(2);
  const RunLog resumed = run(config, {}, nullptr, /*resume=*/true);
  EXPECT_EQ(resumed.first_step, 5);
  expect_same_run(resumed, whole);
}

// A rank lost after every shard prepared the step (here while the shards
// send it to their buddies), and no node to take its place: the step is
// discarded, and the survivors - whose prepare it made void - save the last
// checkpoint of the step before, from which the job resumes exactly.
// (Before, a survivor's shard refused the save: "step 4 is prepared, not
// committed".)
TEST_F(RecoveryReliabilityTest, ARankLostAfterThePrepareWithoutANodeLeavesALastCheckpoint) {
  fs::create_directories(dir_);
  const std::string armed = dir_ + "/armed";
  ::setenv("TROUPE_FAILPOINT", absl::StrCat("replicate:d1.p0.t0:4:", armed).c_str(), 1);
  start_cluster(2);  // no spare
  ::unsetenv("TROUPE_FAILPOINT");
  TrainConfig config = config_for(3, dir_ + "/ckpt");
  config.checkpoint.interval_steps = 0;  // the last checkpoint only
  config.fault_tolerance.wait_for_node_s = 1;
  const RunLog whole = run(config);
  std::ofstream(armed).put('1');
  const RunLog failed = run(config);
  EXPECT_FALSE(fs::exists(armed)) << "the failpoint did not fire";
  expect_last_checkpoint_resumes(config, failed, 3, whole);
}

// With no node for a lost rank, the job ends once wait_for_node_s has
// passed, not when a call to the rank's replacement gives up: before, the
// failed step's discard waited the driver's restart_wait (30 s) on the lost
// stage's replacement, which had no node to start on.
TEST_F(RecoveryReliabilityTest, WithoutANodeTheJobEndsOnceWaitForNodeSHasPassed) {
  start_cluster(2);
  TrainConfig config = config_for(0);
  config.fault_tolerance.wait_for_node_s = 2;
  absl::Time start = absl::Now();
  const RunLog whole = run(config);
  const absl::Duration whole_took = absl::Now() - start;
  start = absl::Now();
  const RunLog failed = run(config, {{.step = 3, .rank = 1}});
  const absl::Duration failed_took = absl::Now() - start;
  ASSERT_TRUE(absl::StrContains(failed.status.message(), "no node took the place of d1.p0.t0"))
      << failed.status;
  // It ran fewer steps than the whole run, and waited wait_for_node_s (with
  // room for a loaded machine; before, it took restart_wait, 30 s, more).
  EXPECT_LT(failed_took,
            whole_took + absl::Seconds(config.fault_tolerance.wait_for_node_s) + absl::Seconds(10))
      << "the whole run took " << whole_took;
}

TEST_F(RecoveryTest, WithoutANodeForTheReplacementTheJobEndsWithAClearError) {
  start_cluster(2);
  TrainConfig config = config_for(0);
  config.fault_tolerance.wait_for_node_s = 1;
  const RunLog failed = run(config, {{.step = 3, .rank = 1, .before_step = true}});
  EXPECT_FALSE(failed.status.ok());
  EXPECT_TRUE(absl::StrContains(failed.status.message(), "no node took the place of d1.p0.t0"))
      << failed.status;
  EXPECT_EQ(failed.outcomes.size(), 2u);
}

// No node comes for the lost rank: the job ends, and the survivors save a
// last checkpoint in its place - DDP's from the surviving replica, ZeRO-3's
// lost partition from the replica its buddy keeps - from which the job,
// given a node again, resumes and ends as the run without failures.
TEST_F(RecoveryTest, WithoutANodeTheSurvivorsSaveALastCheckpointThatResumesExactly) {
  start_cluster(2);
  for (int stage : {0, 3}) {
    TrainConfig config = config_for(stage, absl::StrCat(dir_, "/ckpt-zero", stage));
    config.checkpoint.interval_steps = 0;  // the last checkpoint only
    config.fault_tolerance.wait_for_node_s = 1;
    const RunLog whole = run(config);
    const RunLog failed = run(config, {{.step = 4, .rank = 1}});
    expect_last_checkpoint_resumes(config, failed, 3, whole);
  }
}

TEST_F(RecoveryTest, AZeroPartitionIsRestoredFromTheReplicaItsBuddyKeeps) {
  start_cluster(3);
  for (int stage : {1, 3}) {
    const TrainConfig config = config_for(stage);
    const RunLog whole = run(config);
    // A loss inside a step, and one between steps of the rank that just
    // took the other's replica.
    std::mt19937 rng(stage);
    std::uniform_real_distribution<double> within(0, 30);
    const RunLog failed = run(
        config,
        {{.step = 4, .rank = 1, .delay = absl::Milliseconds(within(rng))}, {.step = 7, .rank = 0}},
        [&](const RecoveryReport&) {
          absl::StatusOr<int> added = local_->add_worker("CPU=1");
          EXPECT_TRUE(added.ok()) << added.status();
        });
    expect_same_run(failed, whole);
    ASSERT_EQ(failed.recoveries.size(), 2u) << "ZeRO-" << stage;
    for (const RecoveryReport& r : failed.recoveries) {
      EXPECT_FALSE(r.checkpoint_step.has_value()) << r.summary();
      EXPECT_LE(r.steps_lost, 1) << r.summary();
      ASSERT_EQ(r.restored.size(), 1u) << r.summary();
      EXPECT_TRUE(absl::StrContains(r.restored[0], "from its replica on")) << r.summary();
    }
  }
}

TEST_F(RecoveryTest, PrimaryAndBuddyBothLostComeBackFromTheCheckpoint) {
  start_cluster(4);  // two ranks and two spares
  const TrainConfig config = config_for(3, dir_ + "/ckpt");
  const RunLog whole = run(config);
  fs::remove_all(dir_);
  // Both ranks' nodes at once: no copy of either partition survives.
  const RunLog failed = run(config, {{.step = 6, .rank = 0}, {.step = 6, .rank = 1}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  ASSERT_TRUE(r.checkpoint_step.has_value()) << r.summary();
  EXPECT_EQ(*r.checkpoint_step, 4);
  EXPECT_EQ(r.steps_lost, 2);
  EXPECT_EQ(r.lost.size(), 2u) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "back to the checkpoint of step 4")) << r.summary();
}

// The mesh dp x pp x tp = 2 x 2 x 2 of the same model and batch: each
// stage of a replica two slices of 2 CPUs' bundle, 2 micro-batches a step.
TrainConfig hybrid_config(const std::string& checkpoint_dir = "") {
  TrainConfig c = config_for(0, checkpoint_dir);
  c.parallel.pp = 2;
  c.parallel.tp = 2;
  c.parallel.schedule = actors::pipeline::ScheduleKind::kOneFOneB;
  return c;
}

// A worker hosting a pipeline stage's bundle (both its tp slices) is lost
// between steps, then another at a seeded moment inside a step: the head
// restarts their actors on a spare, every kind of group (data-parallel, pipe,
// tp) is formed again, the lost shards take the state of the other replica's
// shards of the same stage and slice, and the run ends bitwise as the one
// without failures.
TEST_F(RecoveryTest, AHybridMeshLosesStagesAndEndsBitwiseEqual) {
  start_cluster(5, "CPU=2");  // a bundle of 2 CPUs for each of 2 x 2 stages, and a spare
  const TrainConfig config = hybrid_config();
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  double step_ms = 0;
  for (const StepOutcome& o : whole.outcomes)
    step_ms += o.step_ms / static_cast<double>(whole.outcomes.size());
  std::mt19937 rng(20261204);
  std::uniform_real_distribution<double> within(0, 1.5 * step_ms);
  const std::vector<Kill> kills = {
      {.step = 3, .rank = 1, .p = 1},
      {.step = 6, .rank = 0, .p = 0, .delay = absl::Milliseconds(within(rng))}};
  // Each recovery takes the spare: a new one joins for the next.
  const RunLog failed = run(config, kills, [&](const RecoveryReport&) {
    absl::StatusOr<int> added = local_->add_worker("CPU=2");
    EXPECT_TRUE(added.ok()) << added.status();
  });
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 2u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.steps_lost, 1);
  ASSERT_EQ(r.lost.size(), 2u) << r.summary();  // both slices of stage d1.p1
  ASSERT_EQ(r.restored.size(), 2u) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p1.t0 restored from d0.p1.t0")) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p1.t1 restored from d0.p1.t1")) << r.summary();
  for (const RecoveryReport& each : failed.recoveries) {
    EXPECT_LE(each.steps_lost, 1) << each.summary();
    EXPECT_FALSE(each.checkpoint_step.has_value()) << each.summary();
  }
}

// Interleaved 1F1B: a stage's two model chunks (virtual stages p and p + 2)
// share its bundle, so one worker hosts both. Losing it loses both; the head
// restarts them together on the spare, they take turns again there, and the
// run ends bitwise as the one without failures.
TEST_F(RecoveryTest, AnInterleavedStageLosesBothChunksAndEndsBitwiseEqual) {
  start_cluster(5, "CPU=1");  // a bundle for each of 2 x 2 stages, and a spare
  TrainConfig config = config_for(0);
  config.model.gpt2()->num_layers = 4;  // a block a chunk
  config.parallel.pp = 2;
  config.parallel.schedule = actors::pipeline::ScheduleKind::kInterleaved;
  config.parallel.virtual_stages = 2;
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  const RunLog failed = run(config, {{.step = 4, .rank = 1, .p = 1}}, [&](const RecoveryReport&) {
    absl::StatusOr<int> added = local_->add_worker("CPU=1");
    EXPECT_TRUE(added.ok()) << added.status();
  });
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_EQ(r.steps_lost, 1);
  EXPECT_EQ(r.lost.size(), 2u) << r.summary();  // chunks 0 and 1 of stage 1: d1.p1 and d1.p3
  // Lost with their node: named together, before its reason.
  EXPECT_TRUE(absl::StrContains(r.summary(), "lost d1.p1.t0, d1.p3.t0 (its node")) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p1.t0 restored from d0.p1.t0")) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p3.t0 restored from d0.p3.t0")) << r.summary();
}

// ZeRO-1 over dp with pp and tp: a lost stage's partitions come back from
// the replicas their buddies (the same stage and slice of the next replica)
// keep, and the run ends bitwise as the one without failures.
TEST_F(RecoveryTest, AHybridMeshUnderZero1RestoresPartitionsFromBuddies) {
  start_cluster(5, "CPU=2");
  TrainConfig config = hybrid_config();
  config.zero.stage = 1;
  const RunLog whole = run(config);
  const RunLog failed = run(config, {{.step = 4, .rank = 1, .p = 0}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_FALSE(r.checkpoint_step.has_value()) << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p0.t0 restored from its replica on d0.p0.t0"))
      << r.summary();
  EXPECT_TRUE(absl::StrContains(r.summary(), "d1.p0.t1 restored from its replica on d0.p0.t1"))
      << r.summary();
}

// With dp 1 no other replica holds a lost stage's state: the job goes back
// to its latest checkpoint, of every stage and slice, and runs the steps
// since again, ending as the run without failures.
TEST_F(RecoveryTest, AStageWithoutAReplicaComesBackFromTheCheckpoint) {
  start_cluster(3, "CPU=2");  // a bundle for each of 2 stages, and a spare
  TrainConfig config = hybrid_config(dir_ + "/whole");
  config.parallel.dp = 1;
  config.gradient_accumulation_steps = 4;
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.checkpoints_failed.empty());
  config.checkpoint.dir = dir_ + "/failed";
  const RunLog failed = run(config, {{.step = 5, .rank = 0, .p = 1}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  ASSERT_TRUE(r.checkpoint_step.has_value()) << r.summary();
  EXPECT_EQ(*r.checkpoint_step, 4);
  EXPECT_EQ(r.steps_lost, 1);
  EXPECT_EQ(r.lost.size(), 2u) << r.summary();
}

// A worker that dies at a chosen phase of a step (actors/failpoint.h): the
// job loses at most that step and ends as the run without failures.
struct Phase {
  int zero_stage = 0;
  const char* phase = "";
  int rank = 1;
};

class RecoveryPhaseTest : public RecoveryTest, public ::testing::WithParamInterface<Phase> {};

TEST_P(RecoveryPhaseTest, AWorkerDyingInThisPhaseCostsAtMostTheStepInFlight) {
  const Phase& p = GetParam();
  const bool checkpoint = std::string(p.phase) == "checkpoint";
  // The checkpoint of step 4 is written while step 5 runs.
  const int64_t step = checkpoint ? 4 : 5;
  fs::create_directories(dir_);
  const std::string armed = dir_ + "/armed";
  const std::string spec = absl::StrCat(p.phase, ":d", p.rank, ".p0.t0:", step, ":", armed);
  ::setenv("TROUPE_FAILPOINT", spec.c_str(), 1);  // the workers' environment
  start_cluster(3);
  ::unsetenv("TROUPE_FAILPOINT");
  TrainConfig config = config_for(p.zero_stage, checkpoint ? dir_ + "/whole" : "");
  if (checkpoint) config.checkpoint.async = true;
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.checkpoints_failed.empty());
  std::ofstream(armed).put('1');
  if (checkpoint) config.checkpoint.dir = dir_ + "/failed";
  const RunLog failed = run(config);
  EXPECT_FALSE(fs::exists(armed)) << "the failpoint " << spec << " did not fire";
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  EXPECT_FALSE(r.checkpoint_step.has_value()) << r.summary();
  // Past the commit point the survivors applied the step: nothing runs again.
  // The checkpoint is written beside step 5, and its writer may reach the
  // failpoint before or after that step's commit point: one step at most.
  if (checkpoint) {
    EXPECT_LE(r.steps_lost, 1) << r.summary();
  } else {
    EXPECT_EQ(r.steps_lost, std::string(p.phase) == "commit" ? 0 : 1) << r.summary();
  }
  if (checkpoint) {
    // The checkpoint the lost shard was writing failed; the next ones did not.
    ASSERT_EQ(failed.checkpoints_failed.size(), 1u);
    EXPECT_EQ(failed.checkpoints_failed[0].step, 4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Phases, RecoveryPhaseTest,
    ::testing::Values(Phase{0, "forward", 1}, Phase{0, "backward", 0}, Phase{0, "allreduce", 1},
                      Phase{0, "commit", 0}, Phase{0, "checkpoint", 1}, Phase{3, "forward", 0},
                      Phase{3, "allreduce", 1}, Phase{3, "commit", 1}, Phase{3, "replicate", 0},
                      Phase{1, "replicate", 1}, Phase{3, "checkpoint", 0}),
    [](const ::testing::TestParamInfo<Phase>& param) {
      return absl::StrCat(param.param.zero_stage == 0 ? "Ddp" : "Zero",
                          param.param.zero_stage == 0 ? "" : absl::StrCat(param.param.zero_stage),
                          "_", param.param.phase, "_d", param.param.rank);
    });

// A worker frozen (SIGSTOP) with no node to take its place (a probe saw its
// error twice): the job ends naming the node's loss once - in the step's
// failure - and why the recovery could not be made, not the loss again.
TEST_F(RecoveryReliabilityTest, AFrozenWorkerWithNoNodeForItsPlaceIsNamedOnce) {
  start_cluster(2);  // two ranks, no spare, no room beside the survivor
  TrainConfig config = config_for(0);
  config.fault_tolerance.wait_for_node_s = 2;
  const RunLog failed = run(config, {{.step = 3, .rank = 1, .signal = SIGSTOP}});
  ASSERT_FALSE(failed.status.ok());
  const std::string message(failed.status.message());
  std::printf("[ ended ] %s\n", message.c_str());
  EXPECT_TRUE(absl::StrContains(message, "recovering failed: no node took the place of d1.p0.t0"))
      << message;
  size_t said = 0;
  for (size_t at = message.find("no heartbeat"); at != std::string::npos;
       at = message.find("no heartbeat", at + 1)) {
    ++said;
  }
  EXPECT_EQ(said, 1u) << message;
  // What the user can do is still said.
  EXPECT_TRUE(absl::StrContains(message, "add a worker")) << message;
  for (int i = 0; i < local_->num_workers(); ++i)
    local_->kill_worker(i, SIGCONT);
}

// Back to a checkpoint (a ZeRO partition and its buddy lost together), the
// steps since it run again: the time the recoveries cost is measured - the
// failed attempt, the recovery and the steps run again - not the recovery's
// own time alone (a probe saw "175 steps run again, 0s lost").
TEST_F(RecoveryReliabilityTest, TheTimeLostCountsTheStepsRunAgain) {
  start_cluster(4);  // two ranks and two spares
  TrainConfig config = config_for(3, dir_ + "/ckpt");
  config.checkpoint.interval_steps = 5;  // steps 6-8 run again after a loss at step 9
  const RunLog whole = run(config);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  fs::remove_all(dir_);
  const RunLog failed = run(config, {{.step = 9, .rank = 0}, {.step = 9, .rank = 1}});
  expect_same_run(failed, whole);
  ASSERT_EQ(failed.recoveries.size(), 1u);
  const RecoveryReport& r = failed.recoveries[0];
  ASSERT_TRUE(r.checkpoint_step.has_value()) << r.summary();
  EXPECT_EQ(*r.checkpoint_step, 5);
  EXPECT_EQ(r.steps_lost, 4) << r.summary();
  // Steps 6-8 ran again (as long as the run without failures took for them,
  // give or take), on top of the recovery itself.
  double rerun_ms = 0;
  for (int k = 6; k <= 8; ++k)
    rerun_ms += whole.outcomes[static_cast<size_t>(k - 1)].step_ms;
  std::printf("[ lost ] %.0f ms; the recovery %.0f ms, steps 6-8 %.0f ms without failures\n",
              failed.lost_ms, r.total_ms, rerun_ms);
  // (Before, the time lost was the recoveries' own, total_ms, exactly.)
  EXPECT_GT(failed.lost_ms, r.total_ms) << r.summary();
  EXPECT_GE(failed.lost_ms, r.total_ms + 0.25 * rerun_ms) << r.summary();
}

}  // namespace
}  // namespace troupe::trainers
