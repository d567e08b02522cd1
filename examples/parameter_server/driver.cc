// Trains with a parameter server and two workers on a running cluster whose
// workers loaded libps_actors.so, through a worker's machine lost (SIGKILL,
// the worker replaced) and the server's (restarted, restored from the
// replica this driver keeps):
//
//   ps_driver [--head HOST:PORT] [--token-file PATH] [--rounds 30]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cluster/cluster.h"
#include "ps_actors.h"

int main(int argc, char** argv) {
  troupe::ClusterOptions options{.name = "parameter server example"};
  int rounds = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--head")) options.head = argv[i + 1];
    if (!std::strcmp(argv[i], "--token-file")) options.token_file = argv[i + 1];
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::max(3, std::atoi(argv[i + 1]));
  }
  auto cluster = troupe::Cluster::connect(options);
  if (!cluster.ok()) return std::printf("ps_driver: %s\n", cluster.status().ToString().c_str()), 1;
  auto replica = (*cluster)->spawn_local<ps::Replica>({});
  auto server =
      (*cluster)->spawn<ps::ParameterServer>({.name = "ps", .max_restarts = 3}, *replica, 0.1);
  if (!server.ok()) return std::printf("ps_driver: %s\n", server.status().ToString().c_str()), 1;
  auto spawn_worker = [&](int seed) { return (*cluster)->spawn<ps::Worker>({}, *server, seed); };
  std::vector<troupe::ActorRef<ps::Worker>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(*spawn_worker(i));

  float first = -1, last = -1;
  int64_t version = 0;
  for (int round = 1; round <= rounds; ++round) {
    if (round == rounds / 3) {
      std::printf("round %d: SIGKILL the machine of worker 0\n", round);
      workers[0].tell(&ps::Worker::crash);
    }
    if (round == 2 * rounds / 3) {
      std::printf("round %d: SIGKILL the machine of the server\n", round);
      server->tell(&ps::ParameterServer::crash);
    }
    std::vector<troupe::Future<float>> steps;
    for (auto& w : workers)
      steps.push_back(w.call(&ps::Worker::step));
    for (size_t i = 0; i < workers.size(); ++i) {
      absl::StatusOr<float> loss = steps[i].get(absl::Seconds(90));
      if (loss.ok()) {
        last = *loss;
        if (first < 0) first = *loss;
        continue;
      }
      std::printf("round %d: worker %zu: %s\n", round, i, loss.status().ToString().c_str());
      if (troupe::IsActorDied(loss.status()) &&
          loss.status().message().find(troupe::to_string(workers[i].id())) != std::string::npos) {
        auto again = spawn_worker(static_cast<int>(10 + round));
        if (!again.ok())
          return std::printf("ps_driver: %s\n", again.status().ToString().c_str()), 1;
        workers[i] = *again;
        std::printf("round %d: worker %zu replaced\n", round, i);
      }
    }
    auto now = server->call(&ps::ParameterServer::version).get(absl::Seconds(60));
    if (!now.ok()) return std::printf("ps_driver: %s\n", now.status().ToString().c_str()), 1;
    if (*now < version) return std::printf("ps_driver: the server lost its weights\n"), 1;
    version = *now;
    std::printf("round %d: loss %.4f, server at version %lld\n", round, last,
                static_cast<long long>(version));
  }
  std::printf("done: loss %.4f -> %.4f\n", first, last);
  return last >= 0 && last < first / 10 ? 0 : 1;
}
