// A tour of troupe's actor API: a tiny sharded parameter store.
//
// Two ParameterShard actors each own half of a parameter vector; trainer
// code pushes gradients to them and reads the weights back. Each shard copies
// its state to a Replica after every update (the way troupe's parameter
// shards replicate to a buddy). Midway we kill one shard with a crash; it
// restarts, restores from its replica in on_restart, and the run finishes with
// exactly the weights a failure-free run would have.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/actor.h"

namespace demo {

using troupe::ActorRef;
using troupe::Future;

// Holds the last state a shard sent it.
class Replica {
 public:
  void save(int step, std::vector<float> weights) {
    step_ = step;
    weights_ = std::move(weights);
  }
  std::vector<float> weights() const { return weights_; }
  int step() const { return step_; }

 private:
  int step_ = 0;
  std::vector<float> weights_;
};
TROUPE_ACTOR(Replica, &Replica::save, &Replica::weights, &Replica::step);

class ParameterShard {
 public:
  ParameterShard(int size, float learning_rate, ActorRef<Replica> replica)
      : weights_(size, 1.0f), learning_rate_(learning_rate), replica_(replica) {}

  // SGD on this shard's slice; returns the step number applied.
  absl::StatusOr<int> apply(int step, std::vector<float> gradient) {
    if (gradient.size() != weights_.size()) {
      return absl::InvalidArgumentError("gradient has the wrong size");
    }
    for (size_t i = 0; i < weights_.size(); ++i)
      weights_[i] -= learning_rate_ * gradient[i];
    step_ = step;
    replica_.tell(&Replica::save, step_, weights_);
    return step_;
  }
  std::vector<float> weights() const { return weights_; }

  // After a crash: restore from the replica instead of starting from scratch.
  // The replica's answer is awaited here; the shard's pending updates wait in
  // its mailbox meanwhile and then apply on the restored state.
  void on_restart(const troupe::RestartInfo& info) {
    std::printf("  shard restarted (#%d) after: %s\n", info.restart_count,
                std::string(info.reason.message()).c_str());
    auto saved = replica_.call(&Replica::weights).get(absl::Seconds(10));
    auto saved_step = replica_.call(&Replica::step).get(absl::Seconds(10));
    if (saved.ok() && saved_step.ok() && !saved->empty()) {
      weights_ = *std::move(saved);
      step_ = *saved_step;
      std::printf("  restored step %d from the replica\n", step_);
    }
  }

 private:
  std::vector<float> weights_;
  float learning_rate_;
  ActorRef<Replica> replica_;
  int step_ = 0;
};
TROUPE_ACTOR(ParameterShard, &ParameterShard::apply, &ParameterShard::weights);

// Runs `steps` of training; crashes shard 0 at `crash_at` (or never if < 0).
std::vector<float> train(int steps, int crash_at) {
  troupe::ActorSystem system;
  constexpr int kShardSize = 4;
  std::vector<ActorRef<ParameterShard>> shards;
  for (int s = 0; s < 2; ++s) {
    auto replica = system.spawn<Replica>({});
    auto shard = system.spawn<ParameterShard>(
        {.name = "shard-" + std::to_string(s), .max_restarts = 3}, kShardSize, 0.1f, *replica);
    if (!replica.ok() || !shard.ok()) std::exit(1);
    system.monitor(*shard, [](troupe::ActorId id, const absl::Status& why) {
      std::printf("  %s terminated: %s\n", troupe::to_string(id).c_str(),
                  std::string(why.message()).c_str());
    });
    shards.push_back(*shard);
  }

  for (int step = 1; step <= steps; ++step) {
    if (step == crash_at) {
      std::printf("  step %d: crashing shard-0\n", step);
      system.kill(shards[0], /*no_restart=*/false);
    }
    // One gradient per shard, pushed to both shards concurrently.
    std::vector<Future<int>> applied;
    for (int s = 0; s < 2; ++s) {
      std::vector<float> gradient(kShardSize, static_cast<float>(step % 3) - 0.5f * s);
      applied.push_back(shards[s].call(&ParameterShard::apply, step, gradient));
    }
    auto done = troupe::when_all(std::move(applied)).get(absl::Seconds(30));
    if (!done.ok()) {
      std::printf("step %d failed: %s\n", step, done.status().ToString().c_str());
      std::exit(1);
    }
  }

  // Looked up by name, as another part of the program would.
  std::vector<float> all;
  for (int s = 0; s < 2; ++s) {
    auto shard = system.lookup<ParameterShard>("shard-" + std::to_string(s));
    auto w = shard->call(&ParameterShard::weights).get(absl::Seconds(10));
    all.insert(all.end(), w->begin(), w->end());
  }
  return all;
}

}  // namespace demo

int main() {
  constexpr int kSteps = 20;
  std::printf("troupe actors demo: 2 parameter shards, %d steps\n", kSteps);
  std::printf("run 1: no failures\n");
  std::vector<float> clean = demo::train(kSteps, -1);
  std::printf("run 2: shard-0 crashes at step 8\n");
  std::vector<float> recovered = demo::train(kSteps, 8);

  std::printf("weights, clean run:     ");
  for (float w : clean)
    std::printf(" %.3f", w);
  std::printf("\nweights, recovered run: ");
  for (float w : recovered)
    std::printf(" %.3f", w);
  std::printf("\n");
  if (clean != recovered) {
    std::printf("MISMATCH: recovery lost or repeated an update\n");
    return 1;
  }
  std::printf("identical: the crash cost no update\n");
  return 0;
}
