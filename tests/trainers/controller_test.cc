// TrainerController on an in-process ActorSystem, with stand-in stage and
// shard actors: no processes, no model. Each stand-in reports what the test
// scripts (its owned range, norm, loss) and records every call, so the tests
// check what the controller combines, whom it calls with which step, and where
// the job stands after each kind of failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/actor.h"
#include "core/executor.h"
#include "trainers/trainer_controller.h"

namespace troupe::trainers {
namespace {

using actors::CommitRequest;
using actors::Coordinate;
using actors::Mesh;
using actors::StepReport;
using actors::StepRequest;

constexpr absl::Duration kWait = absl::Seconds(30);

// What every stand-in of one test reports and records, by coordinate.
struct Script {
  struct Stage {
    nn::ParamRange owned;
    int64_t slice_params = 0;
    bool holds_loss = false;
    double loss = 0;
    double norm_sq = 0;
    bool found_inf = false;
    int64_t fail_step = 0;     // run_step of this step fails
    int64_t fail_discard = 0;  // discard of this step fails
    int64_t hang_step = 0;     // run_step of this step hangs (until `release`)
  };
  struct Shard {
    int64_t refuse_prepare = 0;   // prepare of this step is refused
    int64_t lost_replies = 0;     // commits of lost_reply_step that apply, then fail
    int64_t lost_reply_step = 0;  // (as a reply lost on the way back would)
    int64_t die_in_commit = 0;    // commit of this step throws: the actor dies
    int64_t applied = 0;
    int64_t updates = 0;
    float last_lr = 0;
    float last_grad_scale = 0;
    actors::StepProgress progress;  // what progress() answers
    bool progress_hangs = false;    // progress() does not answer (until `release`)
  };
  std::mutex mu;
  std::atomic<bool> release{false};  // ends every hang (at the end of a test)

  // Blocks until `release`, for 30 s at most (letting the actor system run
  // other actors meanwhile, as a worker process with threads to spare does).
  void hang() {
    BlockingRegion region;
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (!release.load() && absl::Now() < until)
      absl::SleepFor(absl::Milliseconds(5));
  }
  std::map<std::string, Stage> stages;
  std::map<std::string, Shard> shards;
  std::vector<std::string> calls;  // "run d0.p1.t0 3", "discard ...", "prepare ...", "commit ..."

  void record(const std::string& what, const Coordinate& at, int64_t step) {
    std::lock_guard lock(mu);
    calls.push_back(what + " " + actors::to_string(at) + " " + std::to_string(step));
  }
  int count(const std::string& prefix) {
    std::lock_guard lock(mu);
    int n = 0;
    for (const std::string& c : calls)
      n += c.rfind(prefix, 0) == 0 ? 1 : 0;
    return n;
  }
};

class FakeStage {
 public:
  FakeStage(Script* script, Coordinate at) : script_(script), at_(at) {}
  absl::StatusOr<StepReport> run_step(StepRequest request) {
    script_->record("run", at_, request.step);
    bool hang = false;
    {
      std::lock_guard lock(script_->mu);
      hang = request.step == script_->stages[actors::to_string(at_)].hang_step;
    }
    if (hang) script_->hang();
    std::lock_guard lock(script_->mu);
    const Script::Stage& s = script_->stages[actors::to_string(at_)];
    if (request.step == s.fail_step) {
      return absl::AbortedError(absl::StrCat("stage ", actors::to_string(at_), ": group lost"));
    }
    StepReport r;
    r.step = request.step;
    r.at = at_;
    r.owned = s.owned;
    r.slice_params = s.slice_params;
    r.holds_loss = s.holds_loss;
    r.loss = s.loss;
    r.grad_norm_sq = s.found_inf ? INFINITY : s.norm_sq * request.loss_scale * request.loss_scale;
    r.found_inf = s.found_inf;
    r.samples = s.holds_loss ? 4 : 0;
    r.tokens = r.samples * 8;
    return r;
  }
  absl::Status discard(int64_t step) {
    script_->record("discard", at_, step);
    std::lock_guard lock(script_->mu);
    if (step == script_->stages[actors::to_string(at_)].fail_discard) {
      return absl::UnavailableError("the stage's worker is unreachable");
    }
    return absl::OkStatus();
  }
  // Checkpoints are not this test's (checkpoint_resume_test.cc).
  absl::StatusOr<int64_t> seek_data(int64_t position, int64_t) { return position; }
  // Recovery is not this test's either (recovery_test.cc).
  absl::Status rejoin() { return absl::UnimplementedError("a fake stage has no group"); }
  absl::Status resize(actors::StageShape) {
    return absl::UnimplementedError("a fake stage has no group");
  }

 private:
  Script* script_;
  Coordinate at_;
};
TROUPE_ACTOR(FakeStage, &FakeStage::run_step, &FakeStage::discard, &FakeStage::seek_data,
             &FakeStage::rejoin, &FakeStage::resize);

class FakeShard {
 public:
  FakeShard(Script* script, Coordinate at) : script_(script), at_(at) {}
  absl::Status prepare(int64_t step) {
    script_->record("prepare", at_, step);
    std::lock_guard lock(script_->mu);
    Script::Shard& s = script_->shards[actors::to_string(at_)];
    if (step == s.refuse_prepare) {
      return absl::FailedPreconditionError(
          absl::StrCat("shard ", actors::to_string(at_), ": prepare of step ", step, " refused"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> commit(CommitRequest request) {
    script_->record("commit", at_, request.step);
    std::lock_guard lock(script_->mu);
    Script::Shard& s = script_->shards[actors::to_string(at_)];
    if (request.step == s.die_in_commit) throw std::runtime_error("worker lost");
    if (request.step != s.applied) {  // a retry of the step applied applies nothing
      s.applied = request.step;
      ++s.updates;
      s.last_lr = request.lr;
      s.last_grad_scale = request.grad_scale;
    }
    if (request.step == s.lost_reply_step && s.lost_replies > 0) {
      --s.lost_replies;
      return absl::DeadlineExceededError("the reply was lost");
    }
    return s.applied;
  }
  int64_t applied_step() const {
    std::lock_guard lock(script_->mu);
    return script_->shards[actors::to_string(at_)].applied;
  }
  absl::StatusOr<actors::ShardSaveReport> save(actors::SaveRequest) {
    return absl::UnimplementedError("a fake shard saves nothing");
  }
  absl::StatusOr<actors::ShardLoadReport> load(actors::LoadRequest) {
    return absl::UnimplementedError("a fake shard loads nothing");
  }
  absl::StatusOr<actors::ShardRestoreReport> restore_from(ActorRef<FakeShard>) {
    return absl::UnimplementedError("a fake shard restores nothing");
  }
  absl::StatusOr<actors::StepProgress> progress() {
    bool hang = false;
    actors::StepProgress p;
    {
      std::lock_guard lock(script_->mu);
      const Script::Shard& s = script_->shards[actors::to_string(at_)];
      hang = s.progress_hangs;
      p = s.progress;
    }
    if (hang) script_->hang();
    return p;
  }
  absl::Status set_buddy(ActorRef<FakeShard>) {
    return absl::UnimplementedError("a fake shard has no buddy");
  }
  absl::Status replicate(CommitRequest) {
    return absl::UnimplementedError("a fake shard has no buddy");
  }
  absl::StatusOr<actors::ShardRestoreReport> restore_from_buddy(ActorRef<FakeShard>, int64_t) {
    return absl::UnimplementedError("a fake shard has no buddy");
  }
  absl::StatusOr<actors::ShardSaveReport> save_replica(actors::SaveRequest) {
    return absl::UnimplementedError("a fake shard has no buddy");
  }

 private:
  Script* script_;
  Coordinate at_;
};
TROUPE_ACTOR(FakeShard, &FakeShard::prepare, &FakeShard::commit, &FakeShard::applied_step,
             &FakeShard::save, &FakeShard::load, &FakeShard::restore_from, &FakeShard::progress,
             &FakeShard::set_buddy, &FakeShard::replicate, &FakeShard::restore_from_buddy,
             &FakeShard::save_replica);

class ControllerTest : public ::testing::Test {
 protected:
  // A stage and a shard at every coordinate of `mesh`; the script's entries
  // are filled by the test before or after.
  TrainerController make(const Mesh& mesh, ControllerOptions options = {}) {
    options.step_timeout = std::min(options.step_timeout, kWait);
    absl::StatusOr<TrainerController> c =
        TrainerController::create(mesh, members_of(mesh), options);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }
  std::vector<MeshMember> members_of(const Mesh& mesh) {
    std::vector<MeshMember> members;
    for (int d = 0; d < mesh.dp; ++d)
      for (int p = 0; p < mesh.pp; ++p)
        for (int t = 0; t < mesh.tp; ++t) {
          const Coordinate at{.d = d, .p = p, .t = t};
          auto stage = system_.spawn<FakeStage>({}, &script_, at);
          auto shard = system_.spawn<FakeShard>({}, &script_, at);
          EXPECT_TRUE(stage.ok() && shard.ok());
          members.push_back(
              {.at = at, .stage = stage_endpoint(*stage), .shard = shard_endpoint(*shard)});
        }
    return members;
  }
  Script::Stage& stage(const Coordinate& at) { return script_.stages[actors::to_string(at)]; }
  Script::Shard& shard(const Coordinate& at) { return script_.shards[actors::to_string(at)]; }

  // Two pipeline stages of a 100-parameter model, [0, 60) and [60, 100); the
  // last holds the loss.
  void two_stages(int dp) {
    for (int d = 0; d < dp; ++d) {
      stage({d, 0, 0}) = {.owned = {0, 60}, .slice_params = 100, .loss = 99, .norm_sq = 9};
      stage({d, 1, 0}) = {.owned = {60, 100},
                          .slice_params = 100,
                          .holds_loss = true,
                          .loss = 2.0 + d,
                          .norm_sq = 16};
    }
  }

  void TearDown() override { script_.release.store(true); }

  Script script_;
  ActorSystem system_{{.threads = 2}};
};

TEST_F(ControllerTest, TwoStagesTwoShardsSumNormsAndTakeTheLossFromTheLastStage) {
  two_stages(1);
  TrainerController c =
      make({.dp = 1, .pp = 2, .tp = 1}, {.lr_schedule = nn::LrSchedule::constant(0.5f)});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->applied);
  EXPECT_DOUBLE_EQ(out->grad_norm, 5.0);  // sqrt(9 + 16): the two owners, summed
  EXPECT_DOUBLE_EQ(out->loss, 2.0);       // the last stage's, not the first's 99
  EXPECT_EQ(out->samples, 4);
  EXPECT_FLOAT_EQ(out->lr, 0.5f);
  for (const Coordinate& at : {Coordinate{0, 0, 0}, Coordinate{0, 1, 0}}) {
    EXPECT_EQ(shard(at).applied, 1) << actors::to_string(at);
    EXPECT_FLOAT_EQ(shard(at).last_lr, 0.5f);
  }
  // Every call names step 1; the phases come in the protocol's order (within
  // a phase the actors answer in any order).
  ASSERT_EQ(script_.calls.size(), 6u);
  std::vector<std::string> calls = script_.calls;
  for (size_t phase = 0; phase < 3; ++phase)
    std::sort(calls.begin() + 2 * phase, calls.begin() + 2 * phase + 2);
  EXPECT_EQ(calls, (std::vector<std::string>{"run d0.p0.t0 1", "run d0.p1.t0 1",
                                             "prepare d0.p0.t0 1", "prepare d0.p1.t0 1",
                                             "commit d0.p0.t0 1", "commit d0.p1.t0 1"}));
  EXPECT_EQ(c.next_step(), 2);
  EXPECT_TRUE(c.step(2).ok());
  EXPECT_EQ(c.applied_steps(), 2);
}

// DDP: replicas own the same range, counted once. ZeRO-style shares: every
// rank owns its own part, all summed. The loss: the mean over the replicas'
// last stages.
TEST_F(ControllerTest, ReplicasOfARangeCountOnceAndSharesAreSummed) {
  two_stages(2);
  TrainerController ddp = make({.dp = 2, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = ddp.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->grad_norm, 5.0);
  EXPECT_DOUBLE_EQ(out->loss, 2.5);  // (2 + 3) / 2, each over 4 samples
  EXPECT_EQ(out->samples, 8);

  script_.stages.clear();
  // Stage 0's [0, 60) split 30/30 over d, stage 1's [60, 100) 20/20.
  stage({0, 0, 0}) = {.owned = {0, 30}, .slice_params = 100, .norm_sq = 1};
  stage({1, 0, 0}) = {.owned = {30, 60}, .slice_params = 100, .norm_sq = 2};
  stage({0, 1, 0}) = {.owned = {60, 80}, .slice_params = 100, .holds_loss = true, .norm_sq = 3};
  stage({1, 1, 0}) = {.owned = {80, 100}, .slice_params = 100, .holds_loss = true, .norm_sq = 10};
  out = ddp.step(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->grad_norm, 4.0);  // sqrt(1 + 2 + 3 + 10)
}

// Elasticity: a job resized between steps goes on with the next step over
// the new members, and its global batch is theirs.
TEST_F(ControllerTest, AResizedJobGoesOnWithTheNextStepOverTheNewMembers) {
  two_stages(3);
  TrainerController c = make({.dp = 2, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->samples, 8);
  EXPECT_DOUBLE_EQ(out->loss, 2.5);  // (2 + 3) / 2
  ASSERT_TRUE(c.resize({.dp = 3, .pp = 2, .tp = 1}, members_of({.dp = 3, .pp = 2, .tp = 1})).ok());
  EXPECT_EQ(c.mesh().dp, 3);
  EXPECT_EQ(c.members().size(), 6u);
  EXPECT_EQ(c.next_step(), 2);
  EXPECT_FALSE(c.step(1).ok());  // the count went on
  out = c.step(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->samples, 12);
  EXPECT_DOUBLE_EQ(out->loss, 3.0);  // (2 + 3 + 4) / 3
  EXPECT_EQ(c.applied_steps(), 2);
  // Members that do not fill the new mesh change nothing.
  EXPECT_EQ(c.resize({.dp = 4, .pp = 2, .tp = 1}, members_of({.dp = 3, .pp = 2, .tp = 1})).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.mesh().dp, 3);
  EXPECT_TRUE(c.step(3).ok());
}

TEST_F(ControllerTest, TheNormIsUnscaledAndClippingScalesTheCommit) {
  stage({0, 0, 0}) = {.owned = {0, 10}, .slice_params = 10, .holds_loss = true, .norm_sq = 16};
  TrainerController c =
      make({.dp = 1, .pp = 1, .tp = 1}, {.gradient_clipping = 1.0f, .static_loss_scale = 8});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->grad_norm, 4.0);
  EXPECT_TRUE(out->clipped);
  // coef 1/4 (to norm 1, less torch's 1e-6), divided by the loss scale 8.
  EXPECT_NEAR(shard({0, 0, 0}).last_grad_scale, 0.25 / 8, 1e-6);
}

TEST_F(ControllerTest, ReplicasThatDisagreeFailTheStepAndNothingIsApplied) {
  two_stages(2);
  stage({1, 1, 0}).norm_sq = 16.000001;
  TrainerController c = make({.dp = 2, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("d0.p1.t0 and d1.p1.t0"), absl::string_view::npos)
      << out.status();
  EXPECT_NE(out.status().message().find("diverged"), absl::string_view::npos);
  for (const char* at : {"d0.p0.t0", "d0.p1.t0", "d1.p0.t0", "d1.p1.t0"})
    EXPECT_EQ(script_.count(std::string("discard ") + at + " 1"), 1) << at;
  EXPECT_EQ(script_.count("prepare"), 0);
  EXPECT_EQ(script_.count("commit"), 0);
  EXPECT_EQ(c.next_step(), 1);
}

TEST_F(ControllerTest, OverlappingOrMissingRangesFailTheStep) {
  two_stages(1);
  stage({0, 1, 0}).owned = {50, 100};
  TrainerController c = make({.dp = 1, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("overlapping gradients [0, 60) and [50, 100)"),
            absl::string_view::npos)
      << out.status();
  stage({0, 1, 0}).owned = {70, 100};
  out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("owns the gradients [60, 70)"), absl::string_view::npos)
      << out.status();
  stage({0, 1, 0}).owned = {60, 90};
  out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("up to 90 of its 100"), absl::string_view::npos)
      << out.status();
  EXPECT_EQ(script_.count("commit"), 0);
  stage({0, 1, 0}).owned = {60, 100};
  EXPECT_TRUE(c.step(1).ok()) << "the step can be re-run once the reports agree";
}

TEST_F(ControllerTest, AStepOutOfTurnIsRefusedNamingBoth) {
  two_stages(1);
  TrainerController c = make({.dp = 1, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(2);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("step 2 requested, but the next step is 1"),
            absl::string_view::npos)
      << out.status();
  EXPECT_EQ(script_.count("run"), 0) << "nothing is asked of the actors";
  ASSERT_TRUE(c.step(1).ok());
  EXPECT_EQ(c.step(1).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a committed step is never run again";
}

TEST_F(ControllerTest, AFailedStageDiscardsTheStepEverywhereAndItCanBeRerun) {
  two_stages(2);
  stage({1, 0, 0}).fail_step = 1;
  TrainerController c = make({.dp = 2, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kAborted);
  EXPECT_NE(out.status().message().find("step 1: stage d1.p0.t0: group lost"),
            absl::string_view::npos)
      << out.status();
  EXPECT_EQ(script_.count("discard"), 4);
  EXPECT_EQ(script_.count("prepare"), 0);
  EXPECT_EQ(c.next_step(), 1);
  stage({1, 0, 0}).fail_step = 0;
  EXPECT_TRUE(c.step(1).ok());
}

// Every shard at step k - 1: a shard that refuses prepare stops the step
// before any shard applies it.
TEST_F(ControllerTest, AShardThatRefusesPrepareLeavesEveryShardAtThePreviousStep) {
  two_stages(2);
  TrainerController c = make({.dp = 2, .pp = 2, .tp = 1});
  ASSERT_TRUE(c.step(1).ok());
  shard({1, 1, 0}).refuse_prepare = 2;
  absl::StatusOr<StepOutcome> out = c.step(2);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(out.status().message().find("step 2: prepare: shard d1.p1.t0: prepare of step 2"),
            absl::string_view::npos)
      << out.status();
  for (int d = 0; d < 2; ++d)
    for (int p = 0; p < 2; ++p)
      EXPECT_EQ(shard({d, p, 0}).applied, 1) << "d" << d << " p" << p;
  EXPECT_EQ(script_.count("commit"), 4) << "only step 1's";
  EXPECT_EQ(script_.count("discard"), 4);
  EXPECT_EQ(c.next_step(), 2);
  EXPECT_EQ(c.applied_steps(), 1);
}

// Every shard at step k: a commit whose reply is lost is retried (and
// applied once); when the retry's reply is lost too, the shard is asked where
// it stands.
TEST_F(ControllerTest, ACommitWhoseReplyIsLostIsRetriedAndAppliedOnce) {
  two_stages(1);
  shard({0, 1, 0}).lost_reply_step = 1;
  shard({0, 1, 0}).lost_replies = 1;
  TrainerController c = make({.dp = 1, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(shard({0, 0, 0}).applied, 1);
  EXPECT_EQ(shard({0, 1, 0}).applied, 1);
  EXPECT_EQ(shard({0, 1, 0}).updates, 1);
  EXPECT_EQ(script_.count("commit d0.p1.t0 1"), 2);
  EXPECT_TRUE(c.lost_shards().empty());

  shard({0, 0, 0}).lost_reply_step = 2;
  shard({0, 0, 0}).lost_replies = 2;
  out = c.step(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(shard({0, 0, 0}).updates, 2) << "two commits of step 2, one update";
  EXPECT_EQ(script_.count("commit d0.p0.t0 2"), 2);
  EXPECT_TRUE(c.lost_shards().empty());
}

// A shard lost in commit: every live shard applied the step, the lost one is
// named, and the job refuses to go on until it is restored.
TEST_F(ControllerTest, AShardLostInCommitIsNamedAndTheOthersAreAtTheStep) {
  two_stages(2);
  shard({1, 0, 0}).die_in_commit = 1;
  TrainerController c = make({.dp = 2, .pp = 2, .tp = 1});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(
      out.status().message().find("every other shard applied it; lost the shards at d1.p0.t0"),
      absl::string_view::npos)
      << out.status();
  ASSERT_EQ(c.lost_shards().size(), 1u);
  EXPECT_TRUE(c.lost_shards()[0] == (Coordinate{1, 0, 0}));
  for (const Coordinate& at : {Coordinate{0, 0, 0}, Coordinate{0, 1, 0}, Coordinate{1, 1, 0}})
    EXPECT_EQ(shard(at).applied, 1) << actors::to_string(at);
  EXPECT_EQ(c.next_step(), 2);
  absl::StatusOr<StepOutcome> next = c.step(2);
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(next.status().message().find("must be restored"), absl::string_view::npos);
}

// ZeRO: dp ranks own disjoint partitions of one stage, so the global norm is
// the sum of their norms, and an overflow in one rank's partition alone skips
// the step on every rank.
TEST_F(ControllerTest, ZeroPartitionsSumTheirNormsAndOneRanksOverflowSkipsEveryRank) {
  stage({0, 0, 0}) = {
      .owned = {0, 34}, .slice_params = 100, .holds_loss = true, .loss = 2, .norm_sq = 9};
  stage({1, 0, 0}) = {
      .owned = {34, 67}, .slice_params = 100, .holds_loss = true, .loss = 4, .norm_sq = 16};
  stage({2, 0, 0}) = {
      .owned = {67, 100}, .slice_params = 100, .holds_loss = true, .loss = 6, .norm_sq = 0};
  TrainerController c =
      make({.dp = 3, .pp = 1, .tp = 1},
           {.dynamic_loss_scale = nn::LossScalerConfig{.initial_scale_power = 2, .hysteresis = 1}});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->applied);
  EXPECT_DOUBLE_EQ(out->grad_norm, 5.0);  // sqrt(9 + 16 + 0): every partition counts once
  EXPECT_DOUBLE_EQ(out->loss, 4.0);
  stage({1, 0, 0}).found_inf = true;  // rank 1's partition alone
  out = c.step(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->applied);
  EXPECT_EQ(script_.count("discard"), 3);
  for (int d = 0; d < 3; ++d)
    EXPECT_EQ(shard({d, 0, 0}).applied, 1) << "rank " << d << " applied the skipped step";
}

TEST_F(ControllerTest, AnOverflowSkipsTheStepOnEveryShardAndBacksOff) {
  two_stages(1);
  stage({0, 0, 0}).found_inf = true;
  TrainerController c =
      make({.dp = 1, .pp = 2, .tp = 1},
           {.dynamic_loss_scale = nn::LossScalerConfig{.initial_scale_power = 4, .hysteresis = 1}});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_FALSE(out->applied);
  EXPECT_EQ(out->loss_scale, 16);
  EXPECT_EQ(c.loss_scale(), 8);
  EXPECT_EQ(script_.count("discard"), 2);
  EXPECT_EQ(script_.count("prepare"), 0);
  EXPECT_EQ(c.next_step(), 2) << "a skipped step is finished";
  EXPECT_EQ(c.applied_steps(), 0);
  stage({0, 0, 0}).found_inf = false;
  out = c.step(2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->applied);
  EXPECT_EQ(shard({0, 0, 0}).applied, 2);
}

// A skipped step whose discard fails is not finished: the controller offers
// it again.
TEST_F(ControllerTest, AnOverflowWhoseDiscardFailsLeavesTheStepToRunAgain) {
  two_stages(1);
  stage({0, 0, 0}).found_inf = true;
  stage({0, 1, 0}).fail_discard = 1;
  TrainerController c =
      make({.dp = 1, .pp = 2, .tp = 1}, {.dynamic_loss_scale = nn::LossScalerConfig{}});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kUnavailable) << out.status();
  EXPECT_NE(out.status().message().find("step 1: discard: "), absl::string_view::npos);
  EXPECT_EQ(c.next_step(), 1);
  EXPECT_EQ(script_.count("prepare"), 0);
}

// With tensor parallelism every slice computes the same loss: slice 0's
// counts; the slices' buffers are separate, each tiled by its own stages.
TEST_F(ControllerTest, TensorSlicesTileTheirOwnBuffersAndCountTheLossOnce) {
  stage({0, 0, 0}) = {
      .owned = {0, 50}, .slice_params = 50, .holds_loss = true, .loss = 1.5, .norm_sq = 4};
  stage({0, 0, 1}) = {
      .owned = {0, 40}, .slice_params = 40, .holds_loss = true, .loss = 1.5, .norm_sq = 5};
  TrainerController c = make({.dp = 1, .pp = 1, .tp = 2});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->grad_norm, 3.0);
  EXPECT_DOUBLE_EQ(out->loss, 1.5);
  EXPECT_EQ(out->samples, 4) << "the batch once, not once per slice";
  stage({0, 0, 1}).owned = {0, 60};
  out = c.step(2);
  ASSERT_EQ(out.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(out.status().message().find("outside its 40 parameters"), absl::string_view::npos)
      << out.status();
}

TEST_F(ControllerTest, MembersMustFillTheMeshOncePerCoordinate) {
  auto stage_ref = system_.spawn<FakeStage>({}, &script_, Coordinate{});
  auto shard_ref = system_.spawn<FakeShard>({}, &script_, Coordinate{});
  ASSERT_TRUE(stage_ref.ok() && shard_ref.ok());
  MeshMember m{.at = {}, .stage = stage_endpoint(*stage_ref), .shard = shard_endpoint(*shard_ref)};
  EXPECT_EQ(TrainerController::create({.dp = 2}, {m}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainerController::create({.dp = 2}, {m, m}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  MeshMember outside = m;
  outside.at = {.d = 0, .p = 1, .t = 0};
  EXPECT_EQ(TrainerController::create({.dp = 1}, {outside}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  MeshMember no_shard = m;
  no_shard.shard = nullptr;
  EXPECT_EQ(TrainerController::create({.dp = 1}, {no_shard}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(TrainerController::create({.dp = 1}, {m}, {}).ok());
}

// A stage that does not answer within step_timeout: the controller asks every
// member how far its step got and tells the one that hung from those waiting
// for it, by the collectives each issued in the group.
TEST_F(ControllerTest, ARankBehindTheOthersCollectivesIsTheOneThatHung) {
  stage({0, 0, 0}) = {
      .owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1, .hang_step = 2};
  stage({1, 0, 0}) = {
      .owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1, .hang_step = 2};
  stage({2, 0, 0}) = {
      .owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1, .hang_step = 2};
  // d1 is stuck before the 4th collective; d0 and d2 issued it and wait.
  shard({0, 0, 0}).progress = {
      .running_step = 2, .grouped = true, .generation = 1, .collectives_issued = 7};
  shard({1, 0, 0}).progress = {
      .running_step = 2, .grouped = true, .generation = 1, .collectives_issued = 6};
  shard({2, 0, 0}).progress = {
      .running_step = 2, .grouped = true, .generation = 1, .collectives_issued = 7};
  TrainerController c =
      make({.dp = 3, .pp = 1, .tp = 1}, {.step_timeout = absl::Milliseconds(300)});
  ASSERT_TRUE(c.step(1).ok());
  EXPECT_TRUE(c.hung().empty());
  absl::StatusOr<StepOutcome> out = c.step(2);
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  ASSERT_EQ(c.hung().size(), 1u) << out.status();
  EXPECT_EQ(actors::to_string(c.hung()[0].at), "d1.p0.t0");
  EXPECT_NE(c.hung()[0].reason.find("stuck before collective 7 of its group, which d"),
            std::string::npos)
      << c.hung()[0].reason;
  EXPECT_NE(out.status().message().find("hung: d1.p0.t0"), std::string::npos) << out.status();
  // The stages still run the step: the controller does not wait to discard it.
  EXPECT_EQ(script_.count("discard"), 0);
  EXPECT_EQ(c.next_step(), 2);
}

TEST_F(ControllerTest, ARankWhoseProcessDoesNotAnswerOrThatFinishedLastHung) {
  for (int d : {0, 1})
    stage({d, 0, 0}) = {.owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1};
  // d1 hangs after its collectives (d0 finished the step); then d0 hangs and
  // its process answers nothing.
  stage({1, 0, 0}).hang_step = 1;
  shard({0, 0, 0}).progress = {
      .running_step = 0, .grouped = true, .generation = 1, .collectives_issued = 5};
  shard({1, 0, 0}).progress = {
      .running_step = 1, .grouped = true, .generation = 1, .collectives_issued = 5};
  TrainerController c =
      make({.dp = 2, .pp = 1, .tp = 1}, {.step_timeout = absl::Milliseconds(300)});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  ASSERT_EQ(c.hung().size(), 1u) << out.status();
  EXPECT_EQ(actors::to_string(c.hung()[0].at), "d1.p0.t0");
  EXPECT_NE(c.hung()[0].reason.find("after the other ranks finished"), std::string::npos)
      << c.hung()[0].reason;
  script_.release.store(true);  // d1 answers now: the step is discarded and run again
  for (const MeshMember& m : c.members())
    ASSERT_TRUE(m.stage->discard(1).get(kWait).ok());
  script_.release.store(false);
  stage({1, 0, 0}).hang_step = 0;
  stage({0, 0, 0}).hang_step = 1;
  shard({0, 0, 0}).progress_hangs = true;
  out = c.step(1);
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  ASSERT_EQ(c.hung().size(), 1u) << out.status();
  EXPECT_EQ(actors::to_string(c.hung()[0].at), "d0.p0.t0");
  EXPECT_NE(c.hung()[0].reason.find("its process does not answer"), std::string::npos)
      << c.hung()[0].reason;
}

// d1 was lost (its run_step failed) and a replacement, not yet in the group,
// answers for it; d0 waits in a collective d1 never joined. d0 did not hang.
TEST_F(ControllerTest, ARankWaitingForOneThatWasLostIsNotSingledOut) {
  for (int d : {0, 1})
    stage({d, 0, 0}) = {.owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1};
  stage({0, 0, 0}).hang_step = 1;
  stage({1, 0, 0}).fail_step = 1;
  shard({0, 0, 0}).progress = {
      .running_step = 1, .grouped = true, .generation = 1, .collectives_issued = 5};
  shard({1, 0, 0}).progress = {.running_step = 0, .grouped = false};
  TrainerController c =
      make({.dp = 2, .pp = 1, .tp = 1}, {.step_timeout = absl::Milliseconds(300)});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_TRUE(c.hung().empty()) << c.hung()[0].reason;
}

TEST_F(ControllerTest, RanksWaitingInTheSameCollectiveAreNotSingledOut) {
  for (int d : {0, 1}) {
    stage({d, 0, 0}) = {
        .owned = {0, 100}, .slice_params = 100, .holds_loss = true, .loss = 1, .hang_step = 1};
    shard({d, 0, 0}).progress = {
        .running_step = 1, .grouped = true, .generation = 3, .collectives_issued = 9};
  }
  TrainerController c =
      make({.dp = 2, .pp = 1, .tp = 1}, {.step_timeout = absl::Milliseconds(300)});
  absl::StatusOr<StepOutcome> out = c.step(1);
  ASSERT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_TRUE(c.hung().empty()) << c.hung()[0].reason;
  EXPECT_NE(out.status().message().find("none of them can be singled out"), std::string::npos)
      << out.status();
}

}  // namespace
}  // namespace troupe::trainers
