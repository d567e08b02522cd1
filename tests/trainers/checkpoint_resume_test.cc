// Checkpoints of a real training job on a local cluster (a head and three
// worker processes of the troupe executable): a run stopped after N steps
// and resumed to 2N is bitwise the run of 2N steps (DDP and ZeRO-3); a
// checkpoint loads into another dp and another ZeRO stage with the next
// step's loss the saved run's; a corrupt shard file makes the load fall back
// to the checkpoint before; a save that fails is reported and training goes
// on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "tests/trainers/training_cluster.h"
#include "trainers/checkpointer.h"
#include "trainers/config.h"
#include "trainers/data_parallel_trainer.h"

namespace troupe::trainers {
namespace {

namespace fs = std::filesystem;
using testing::RunResult;

constexpr int kGlobalBatch = 6;  // dp 1, 2 and 3

// Corrupts `file` (a checkpoint's shard) as a bad disk would: one byte,
// 100 bytes in, flipped; its checksum no longer matches.
void flip_a_byte(const std::string& file) {
  ASSERT_TRUE(fs::exists(file)) << file;
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  char byte = 0;
  f.seekg(100);
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0xFF);
  f.seekp(100);
  f.write(&byte, 1);
}

TrainConfig config_for(int stage, int dp, const std::string& dir) {
  TrainConfig c;
  c.zero.stage = stage;
  c.parallel.dp = dp;
  c.gradient_accumulation_steps = 1;
  c.micro_batch_size = kGlobalBatch / dp;
  c.train_batch_size = kGlobalBatch;
  // ZeRO's partitions cut tensors mid-row for dp 2 and 3.
  c.model = nn::GPTConfig{.max_seq_len = 12,
                          .vocab_size = 64,
                          .padded_vocab_size = 64,
                          .num_layers = 3,
                          .num_heads = 2,
                          .channels = 16};
  c.data.synthetic =
      SyntheticTaskConfig{.task = "addition", .digits = 2, .num_samples = 300, .seed = 5};
  c.optimizer.type = OptimizerType::kAdamW;
  c.optimizer.adamw = {
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  c.lr_schedule = *nn::LrSchedule::warmup_cosine(
      {.base_lr = 3e-3f, .total_num_steps = 20, .warmup_num_steps = 3});
  c.gradient_clipping = 1.0;
  c.zero.reduce_bucket_size = 2000;
  c.zero.stage3_param_persistence_threshold = 50;
  c.zero.stage3_prefetch_bucket_size = 4000;
  c.training.seed = 21;
  c.checkpoint = {.dir = dir, .interval_steps = 0, .keep = 3, .async = true};
  return c;
}

class CheckpointResumeTest : public testing::TrainingClusterTest {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("troupe-resume-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override {
    unmount_.reset();
    fs::remove_all(dir_);
  }

  static std::string next_job() { return "ckpt-test-" + std::to_string(++jobs_); }

  // Mounts a tmpfs at dir_ that holds 1.5 of `config`'s checkpoints (one,
  // not two), unmounted at the end of the test; false where this machine
  // does not let the test mount one (not root, or no CAP_SYS_ADMIN).
  bool mount_small_disk(const TrainConfig& config) {
    fs::create_directories(dir_);
    const int64_t state = 3 * 4 * static_cast<int64_t>(nn::model_layout(config.model).num_params());
    const std::string mount = "mount -t tmpfs -o size=" + std::to_string(state * 3 / 2) +
                              " troupe-test '" + dir_ + "' 2>/dev/null";
    if (std::system(mount.c_str()) != 0) return false;
    unmount_ = std::make_unique<Unmount>(dir_);
    return true;
  }

  // Trains `steps` steps of `config` with its checkpoints; what they did.
  std::vector<CheckpointEvent> train_saving(const TrainConfig& config, int steps) {
    auto trainer = DataParallelTrainer::start(*driver_, config, next_job(), 1);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return {};
    Checkpointer checkpoints((*trainer)->controller(),
                             job_record(config, (*trainer)->data_info().samples_per_epoch),
                             config.checkpoint);
    std::vector<CheckpointEvent> events;
    for (int k = 1; k <= steps; ++k) {
      EXPECT_TRUE((*trainer)->step(k).ok()) << "step " << k;
      for (CheckpointEvent& e : checkpoints.after_step(k))
        events.push_back(std::move(e));
    }
    for (CheckpointEvent& e : checkpoints.finish())
      events.push_back(std::move(e));
    EXPECT_TRUE((*trainer)->stop().ok());
    return events;
  }

  struct Unmount {
    explicit Unmount(std::string d) : dir(std::move(d)) {}
    ~Unmount() { static_cast<void>(std::system(("umount '" + dir + "'").c_str())); }
    std::string dir;
  };
  std::unique_ptr<Unmount> unmount_;

  // Runs steps [from, to] of `config` (testing::run_checkpointed).
  RunResult run(const TrainConfig& config, int from, int to, std::vector<int64_t> save_at = {},
                bool load = false, std::vector<std::string>* skipped = nullptr) {
    return testing::run_checkpointed(*driver_, config, next_job(), from, to, save_at, load,
                                     skipped);
  }

  // The resumed run's steps N+1..2N are the whole run's, bit for bit.
  // Returns the whole run.
  RunResult expect_bitwise_resume(const TrainConfig& config, int n) {
    const RunResult whole = run(config, 1, 2 * n);
    const RunResult first = run(config, 1, n, {n});
    const RunResult second = run(config, n + 1, 2 * n, {}, /*load=*/true);
    EXPECT_EQ(whole.losses.size(), static_cast<size_t>(2 * n));
    EXPECT_EQ(second.losses.size(), static_cast<size_t>(n));
    if (whole.losses.size() != static_cast<size_t>(2 * n) ||
        second.losses.size() != static_cast<size_t>(n)) {
      return whole;
    }
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(first.losses[k], whole.losses[k]) << "step " << k + 1;
      EXPECT_EQ(second.losses[k], whole.losses[n + k]) << "step " << n + k + 1;
      EXPECT_EQ(second.norms[k], whole.norms[n + k]) << "step " << n + k + 1;
      EXPECT_EQ(second.outcomes[k].lr, whole.outcomes[n + k].lr) << "step " << n + k + 1;
      EXPECT_EQ(second.outcomes[k].data_position, whole.outcomes[n + k].data_position);
      EXPECT_EQ(second.outcomes[k].applied, whole.outcomes[n + k].applied);
      EXPECT_EQ(second.outcomes[k].loss_scale, whole.outcomes[n + k].loss_scale);
    }
    EXPECT_EQ(second.params.size(), whole.params.size());
    if (second.params.size() == whole.params.size()) {
      EXPECT_EQ(std::memcmp(second.params.data(), whole.params.data(),
                            whole.params.size() * sizeof(float)),
                0)
          << "the weights after step " << 2 * n << " differ";
    }
    return whole;
  }

  std::string dir_;
  inline static int jobs_ = 0;
};

TEST_F(CheckpointResumeTest, DdpStoppedAfterNAndResumedIsBitwiseTheRunOf2N) {
  expect_bitwise_resume(config_for(0, 2, dir_), 3);
}

TEST_F(CheckpointResumeTest, Zero3StoppedAfterNAndResumedIsBitwiseTheRunOf2N) {
  expect_bitwise_resume(config_for(3, 2, dir_), 3);
}

TEST_F(CheckpointResumeTest, Fp16LossScalerResumesExactly) {
  TrainConfig c = config_for(1, 2, dir_);
  c.fp16.enabled = true;
  // A scale that overflows fp16 at first, backs off, and grows again every
  // second clean step: skipped and applied steps on both sides of the resume.
  c.fp16.dynamic = {.initial_scale_power = 17, .scale_window = 2, .hysteresis = 1};
  const RunResult whole = expect_bitwise_resume(c, 4);
  int skipped = 0;
  for (const StepOutcome& o : whole.outcomes) {
    std::printf("[ checkpoint ] fp16 step %lld: scale %g, %s\n", static_cast<long long>(o.step),
                o.loss_scale, o.applied ? "applied" : "skipped");
    skipped += o.applied ? 0 : 1;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_LT(skipped, static_cast<int>(whole.outcomes.size()));
}

// The next step's loss of a checkpoint loaded into another layout is that of
// the run that saved it (fp32: the reductions' order differs, so 1e-6).
TEST_F(CheckpointResumeTest, ReshardsDp2To1To3AndZero3To0AndBack) {
  const int n = 2;
  // The reference: dp 2 without ZeRO, steps 1..n+3.
  const RunResult reference = run(config_for(0, 2, dir_ + "/ddp"), 1, n + 3, {n});
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(n + 3));
  auto expect_loss = [&](const RunResult& r, int step, const std::string& what) {
    ASSERT_FALSE(r.losses.empty()) << what;
    EXPECT_NEAR(r.losses[0], reference.losses[step - 1], 1e-6 * reference.losses[step - 1])
        << what << ", step " << step;
  };
  // dp 2 -> 1 -> 3, each saving after its first step for the next.
  TrainConfig dp1 = config_for(0, 1, dir_ + "/ddp");
  expect_loss(run(dp1, n + 1, n + 1, {n + 1}, true), n + 1, "dp 2 -> 1");
  TrainConfig dp3 = config_for(0, 3, dir_ + "/ddp");
  expect_loss(run(dp3, n + 2, n + 2, {}, true), n + 2, "dp 1 -> 3");
  // ZeRO-3 over 2 -> DDP over 2 -> ZeRO-3 over 3.
  const RunResult zero = run(config_for(3, 2, dir_ + "/zero"), 1, n, {n});
  for (int k = 0; k < n; ++k)
    EXPECT_NEAR(zero.losses[k], reference.losses[k], 1e-6 * reference.losses[k]);
  expect_loss(run(config_for(0, 2, dir_ + "/zero"), n + 1, n + 1, {n + 1}, true), n + 1,
              "ZeRO-3 -> 0");
  expect_loss(run(config_for(3, 3, dir_ + "/zero"), n + 2, n + 2, {}, true), n + 2,
              "ZeRO-0 -> 3 over 3 ranks");
}

TEST_F(CheckpointResumeTest, ACorruptShardFallsBackToTheCheckpointBefore) {
  const TrainConfig c = config_for(2, 2, dir_);
  const RunResult whole = run(c, 1, 4, {2, 4});
  flip_a_byte(checkpoint::step_dir(dir_, 4) + "/shard-d1.p0.t0.bin");
  std::vector<std::string> skipped;
  const RunResult again = run(c, 3, 4, {}, /*load=*/true, &skipped);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0],
            "step-00000004: shard-d1.p0.t0.bin checksum mismatch in its param (corrupt?); "
            "falling back to step-00000002");
  ASSERT_EQ(again.losses.size(), 2u);
  EXPECT_EQ(again.losses[0], whole.losses[2]);
  EXPECT_EQ(again.losses[1], whole.losses[3]);
}

// The messages a probe of the running system found misleading (also
// `ctest -L reliability`).
class CheckpointReliabilityTest : public CheckpointResumeTest {};

// Every checkpoint corrupt (docs/checkpoint.md: "it stops with every
// reason"): the error names each checkpoint tried with its own reason, not
// only the oldest one's.
TEST_F(CheckpointReliabilityTest, WhenNoCheckpointLoadsTheErrorNamesEachWithItsReason) {
  const TrainConfig c = config_for(2, 2, dir_);
  run(c, 1, 4, {2, 4});
  flip_a_byte(checkpoint::step_dir(dir_, 4) + "/shard-d1.p0.t0.bin");
  flip_a_byte(checkpoint::step_dir(dir_, 2) + "/shard-d0.p0.t0.bin");
  auto trainer = start_trainer(*driver_, c, next_job(), 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Checkpointer checkpoints((*trainer)->controller(),
                           job_record(c, (*trainer)->data_info().samples_per_epoch), c.checkpoint);
  absl::StatusOr<LoadedCheckpoint> loaded = checkpoints.load();
  ASSERT_FALSE(loaded.ok());
  EXPECT_TRUE(absl::IsNotFound(loaded.status())) << loaded.status();
  const std::string message(loaded.status().message());
  const std::string newest =
      "step-00000004: shard-d1.p0.t0.bin checksum mismatch in its param (corrupt?)";
  const std::string oldest =
      "step-00000002: shard-d0.p0.t0.bin checksum mismatch in its param (corrupt?)";
  EXPECT_EQ(message, dir_ + ": no loadable checkpoint (" + newest + "; " + oldest + ")");
  EXPECT_TRUE((*trainer)->stop().ok());
}

// A resume that fell back past a corrupt step N runs step N again and saves
// it: the save replaces the corrupt checkpoint (it used to be refused as
// "already saved and is latest", leaving the corrupt one latest), and the
// next resume loads the new one, with nothing passed over.
TEST_F(CheckpointReliabilityTest, ACorruptLatestIsReplacedByASaveOfTheSameStep) {
  const TrainConfig c = config_for(2, 2, dir_);
  const RunResult whole = run(c, 1, 5, {2, 4});
  ASSERT_EQ(whole.losses.size(), 5u);
  flip_a_byte(checkpoint::step_dir(dir_, 4) + "/shard-d1.p0.t0.bin");
  io::Env* env = io::Env::posix();
  ASSERT_TRUE(absl::IsDataLoss(checkpoint::verify_checkpoint(env, dir_, 4)));
  std::vector<std::string> skipped;
  const RunResult again = run(c, 3, 4, {4}, /*load=*/true, &skipped);  // the save must succeed
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_NE(skipped[0].find("falling back to step-00000002"), std::string::npos) << skipped[0];
  ASSERT_EQ(again.losses.size(), 2u);
  EXPECT_EQ(again.losses[1], whole.losses[3]);
  absl::StatusOr<std::string> latest = env->read_file(dir_ + "/latest");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, checkpoint::latest_pointer(4));
  absl::Status verified = checkpoint::verify_checkpoint(env, dir_, 4);
  EXPECT_TRUE(verified.ok()) << verified;
  skipped.clear();
  const RunResult last = run(c, 5, 5, {}, /*load=*/true, &skipped);
  EXPECT_TRUE(skipped.empty()) << skipped[0];
  ASSERT_EQ(last.losses.size(), 1u);
  EXPECT_EQ(last.losses[0], whole.losses[4]);
}

// Saves that fail on a full disk (a small tmpfs, where this machine lets the
// test mount one) leave no step directories behind: with keep 2 and four
// failed saves after a good one, the good one is all there is.
TEST_F(CheckpointReliabilityTest, SavesFailingOnAFullDiskLeaveNoStepDirectoriesBehind) {
  TrainConfig c = config_for(0, 2, dir_);
  if (!mount_small_disk(c)) {
    GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): failed saves' "
                    "directories are tested with injected faults in checkpoint_format_test only";
  }
  c.checkpoint.interval_steps = 2;
  c.checkpoint.keep = 2;
  const std::vector<CheckpointEvent> events = train_saving(c, 10);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_TRUE(events[0].status.ok()) << events[0].status;
  for (size_t i = 1; i < events.size(); ++i)
    EXPECT_TRUE(absl::IsResourceExhausted(events[i].status)) << events[i].status;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"latest", "step-00000002"}));
  EXPECT_EQ(*io::Env::posix()->read_file(dir_ + "/latest"), checkpoint::latest_pointer(2));
  EXPECT_TRUE(checkpoint::verify_checkpoint(io::Env::posix(), dir_, 2).ok());
}

TEST_F(CheckpointResumeTest, AFailedSaveIsReportedAndTrainingGoesOn) {
  // The checkpoint directory cannot be made: a file stands where it would be.
  std::ofstream(dir_) << "not a directory";
  TrainConfig c = config_for(0, 2, dir_ + "/checkpoints");
  c.checkpoint.interval_steps = 1;
  auto trainer = DataParallelTrainer::start(*driver_, c, next_job(), 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Checkpointer checkpoints((*trainer)->controller(),
                           job_record(c, (*trainer)->data_info().samples_per_epoch), c.checkpoint);
  for (int k = 1; k <= 2; ++k) {
    auto outcome = (*trainer)->step(k);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    std::vector<CheckpointEvent> events = checkpoints.after_step(k);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_FALSE(events[0].status.ok());
    EXPECT_EQ(events[0].step, k);
  }
  EXPECT_TRUE((*trainer)->stop().ok());
  fs::remove(dir_);
}

// A real full disk: a small tmpfs (where this machine lets the test mount
// one) that holds one checkpoint but not two. The shards' background writes
// of the second fail with ENOSPC; that is reported, training goes on, and
// the first stays latest and loads.
TEST_F(CheckpointResumeTest, AShardRunningOutOfSpaceIsReportedAndTrainingGoesOn) {
  TrainConfig c = config_for(0, 2, dir_);
  if (!mount_small_disk(c)) {
    GTEST_SKIP() << "cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): the full disk is "
                    "tested with injected ENOSPC in checkpoint_format_test only";
  }
  c.checkpoint.interval_steps = 2;
  const std::vector<CheckpointEvent> events = train_saving(c, 6);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_TRUE(events[0].status.ok()) << events[0].status;
  for (int i : {1, 2}) {
    EXPECT_TRUE(absl::IsResourceExhausted(events[i].status)) << events[i].status;
    EXPECT_NE(events[i].status.message().find("No space left on device"), std::string::npos)
        << events[i].status;
  }
  absl::StatusOr<std::string> latest = io::Env::posix()->read_file(dir_ + "/latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, checkpoint::latest_pointer(2));
  const RunResult again = run(c, 3, 3, {}, /*load=*/true);
  EXPECT_EQ(again.losses.size(), 1u);
}

TEST_F(CheckpointResumeTest, PeriodicAsyncCheckpointsKeepTheNewest) {
  TrainConfig c = config_for(3, 3, dir_);
  c.checkpoint.interval_steps = 2;
  c.checkpoint.keep = 2;
  auto trainer = DataParallelTrainer::start(*driver_, c, next_job(), 1);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  Checkpointer checkpoints((*trainer)->controller(),
                           job_record(c, (*trainer)->data_info().samples_per_epoch), c.checkpoint);
  std::vector<int64_t> saved;
  auto note = [&](const std::vector<CheckpointEvent>& events) {
    for (const CheckpointEvent& e : events) {
      EXPECT_TRUE(e.status.ok()) << e.status;
      EXPECT_GT(e.bytes, 0);
      saved.push_back(e.step);
    }
  };
  for (int k = 1; k <= 7; ++k) {
    ASSERT_TRUE((*trainer)->step(k).ok());
    note(checkpoints.after_step(k));
  }
  note(checkpoints.finish());
  EXPECT_EQ(saved, (std::vector<int64_t>{2, 4, 6}));
  absl::StatusOr<std::vector<int64_t>> on_disk =
      checkpoint::list_checkpoints(io::Env::posix(), dir_);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_EQ(*on_disk, (std::vector<int64_t>{4, 6}));
  // Three ranks of ZeRO-3: three files, each its partition.
  absl::StatusOr<checkpoint::FoundCheckpoint> found =
      checkpoint::find_checkpoint(io::Env::posix(), dir_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->manifest.step, 6);
  EXPECT_EQ(found->manifest.shards.size(), 3u);
  EXPECT_EQ(found->manifest.layout.zero_stage, 3);
  EXPECT_EQ(found->manifest.data.position, 6 * kGlobalBatch);
  EXPECT_TRUE((*trainer)->stop().ok());
}

}  // namespace
}  // namespace troupe::trainers
