// Logistic regression on three workers, each averaging its shard's gradient over a collective
// group every step. The workers load this file as their actor library; it is also the driver.
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "core/cluster/collective_group.h"

struct Trainer {
  static constexpr float kTruth[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::unique_ptr<troupe::CollectiveGroup> group_;
  float x_[256][8] = {}, y_[256] = {}, w_[8] = {};
  void join() {  // joins the group the driver declared; makes this rank's shard
    group_ = troupe::CollectiveGroup::join("lr").value();
    std::mt19937 rng(group_->rank());
    std::normal_distribution<float> normal;
    for (int i = 0; i < 256; ++i) {
      for (float& x : x_[i])
        x = normal(rng);
      y_[i] = std::inner_product(x_[i], x_[i] + 8, kTruth, 0.0f) > 0 ? 1.0f : 0.0f;
    }
  }
  absl::StatusOr<double> step(double lr) {  // this shard's loss before the step
    if (!group_) join();  // on the first step: every member's first step is in flight
    float grad[8] = {};
    double loss = 0;
    for (int i = 0; i < 256; ++i) {
      float p = 1 / (1 + std::exp(-std::inner_product(w_, w_ + 8, x_[i], 0.0f)));
      loss -= std::log(y_[i] > 0 ? p : 1 - p) / 256;
      for (int d = 0; d < 8; ++d)
        grad[d] += (p - y_[i]) * x_[i][d] / 256;
    }
    absl::Status s = group_->allreduce(troupe::DType::kFloat32, troupe::ReduceOp::kAvg, grad, 8);
    for (int d = 0; d < 8; ++d)
      w_[d] -= static_cast<float>(lr) * grad[d];
    return s.ok() ? absl::StatusOr<double>(loss) : s;
  }
};
TROUPE_ACTOR(Trainer, &Trainer::step);

int main(int argc, char** argv) {  // lr [--head HOST:PORT] [--token-file PATH]
  auto cluster = troupe::Cluster::connect(argc, argv).value();
  std::vector<troupe::ActorRef<Trainer>> trainers;
  for (int i = 0; i < 3; ++i)
    trainers.push_back(cluster->spawn<Trainer>({.resources = "CPU=1"}).value());
  troupe::declare_collective_group(*cluster, "lr",
                                   {trainers[0].id(), trainers[1].id(), trainers[2].id()})
      .value();
  for (int step = 0; step <= 100; ++step) {
    std::vector<troupe::Future<double>> losses;
    for (auto& t : trainers)
      losses.push_back(t.call(&Trainer::step, 0.5));
    std::vector<double> loss = troupe::when_all(std::move(losses)).get().value();
    if (step % 20 == 0)
      std::printf("step %3d  loss %.4f\n", step, (loss[0] + loss[1] + loss[2]) / 3);
  }
}
