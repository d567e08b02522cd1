// A driver process for the job tests: connects to the cluster at --head
// with the token in --token-file, makes what a job owns - a named actor, a
// placement group, a collective group - and, with `detached`, a detached
// actor and placement group too; prints "ready", then either exits in order
// (`exit`) or waits to be killed (`wait`, at most 60 s).
//
//   job_driver wait|exit [detached] --head HOST:PORT --token-file PATH
#include <cstdio>
#include <cstring>
#include <string>

#include "core/cluster/cluster.h"
#include "core/cluster/collective_group.h"
#include "tests/cluster/probe_actors.h"

namespace {

int fail(const char* what, const absl::Status& s) {
  std::printf("job_driver: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using troupe::cluster::PlacementStrategy;
  using troupe::testing::Probe;
  if (argc < 2 || (std::strcmp(argv[1], "wait") != 0 && std::strcmp(argv[1], "exit") != 0)) {
    std::printf("usage: job_driver wait|exit [detached] --head HOST:PORT --token-file PATH\n");
    return 2;
  }
  bool detached = false;
  troupe::ClusterOptions options{.name = "job driver"};
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "detached") == 0) detached = true;
    if (std::strcmp(argv[i], "--head") == 0 && i + 1 < argc) options.head = argv[++i];
    if (std::strcmp(argv[i], "--token-file") == 0 && i + 1 < argc) options.token_file = argv[++i];
  }
  auto cluster = troupe::Cluster::connect(options);
  if (!cluster.ok()) return fail("connect", cluster.status());
  troupe::Cluster& c = **cluster;
  auto probe = c.spawn<Probe>({.name = "job-probe"}, "owned");
  if (!probe.ok()) return fail("spawn job-probe", probe.status());
  auto pg = c.create_placement_group({"CPU=1"}, PlacementStrategy::kPack, "job-pg");
  if (!pg.ok()) return fail("create job-pg", pg.status());
  auto group = troupe::declare_collective_group(c, "job-group", {probe->id()});
  if (!group.ok()) return fail("declare job-group", group.status());
  if (detached) {
    auto kept = c.spawn<Probe>({.name = "job-detached", .detached = true}, "detached");
    if (!kept.ok()) return fail("spawn job-detached", kept.status());
    auto kept_pg = c.create_placement_group({"CPU=1"}, PlacementStrategy::kPack, "job-detached-pg",
                                            /*detached=*/true);
    if (!kept_pg.ok()) return fail("create job-detached-pg", kept_pg.status());
  }
  std::printf("ready job %u\n", c.node_index());
  std::fflush(stdout);
  if (std::strcmp(argv[1], "wait") == 0) absl::SleepFor(absl::Seconds(60));
  return 0;
}
