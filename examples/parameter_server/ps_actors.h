// A parameter server and its workers, as a user's actor library (Ray's
// parameter-server example): each worker pulls the weights, computes a
// gradient of a linear model on its own data and pushes it. The server saves
// every version to a replica the driver keeps, and a restarted server
// resumes from it in on_restart.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <random>
#include <utility>
#include <vector>

#include "core/actor.h"

namespace ps {

using troupe::ActorRef;

constexpr int kDim = 8;

// The latest weights the server saved, with their version.
class Replica {
 public:
  void save(int64_t version, std::vector<float> weights) {
    latest_ = {version, std::move(weights)};
  }
  std::pair<int64_t, std::vector<float>> latest() const { return latest_; }

 private:
  std::pair<int64_t, std::vector<float>> latest_;
};
TROUPE_ACTOR(Replica, &Replica::save, &Replica::latest);

class ParameterServer {
 public:
  ParameterServer(ActorRef<Replica> replica, float learning_rate)
      : replica_(std::move(replica)), learning_rate_(learning_rate), weights_(kDim) {}
  std::vector<float> weights() const { return weights_; }
  int64_t version() const { return version_; }
  int64_t apply(std::vector<float> gradient) {
    for (int i = 0; i < kDim; ++i)
      weights_[i] -= learning_rate_ * gradient[i];
    replica_.tell(&Replica::save, ++version_, weights_);
    return version_;
  }
  void on_restart(const troupe::RestartInfo&) {
    auto latest = replica_.call(&Replica::latest).get(absl::Seconds(30));
    if (latest.ok() && !latest->second.empty()) std::tie(version_, weights_) = *latest;
  }
  void crash() { ::kill(::getpid(), SIGKILL); }  // a machine failure

 private:
  ActorRef<Replica> replica_;
  float learning_rate_;
  std::vector<float> weights_;
  int64_t version_ = 0;
};
TROUPE_ACTOR(ParameterServer, &ParameterServer::weights, &ParameterServer::version,
             &ParameterServer::apply, &ParameterServer::crash);
TROUPE_ACTOR_CONSTRUCTOR(ParameterServer, ActorRef<Replica>, float);

// Fits y = x . (1, 2, ..., kDim) from batches of its own random x.
class Worker {
 public:
  Worker(ActorRef<ParameterServer> server, int seed) : server_(std::move(server)), rng_(seed) {}
  // One pull, gradient and push: the batch's mean squared error before it.
  absl::StatusOr<float> step() {
    auto w = server_.call(&ParameterServer::weights).get(absl::Seconds(60));
    if (!w.ok()) return w.status();
    std::vector<float> gradient(kDim);
    float loss = 0;
    constexpr int kBatch = 32;
    for (int n = 0; n < kBatch; ++n) {
      float x[kDim], error = 0;
      for (int i = 0; i < kDim; ++i) {
        x[i] = std::normal_distribution<float>()(rng_);
        error += x[i] * ((*w)[i] - static_cast<float>(i + 1));
      }
      loss += error * error / kBatch;
      for (int i = 0; i < kDim; ++i)
        gradient[i] += 2 * error * x[i] / kBatch;
    }
    auto pushed = server_.call(&ParameterServer::apply, gradient).get(absl::Seconds(60));
    if (!pushed.ok()) return pushed.status();
    return loss;
  }
  void crash() { ::kill(::getpid(), SIGKILL); }  // a machine failure

 private:
  ActorRef<ParameterServer> server_;
  std::mt19937 rng_;
};
TROUPE_ACTOR(Worker, &Worker::step, &Worker::crash);
TROUPE_ACTOR_CONSTRUCTOR(Worker, ActorRef<ParameterServer>, int);

}  // namespace ps
