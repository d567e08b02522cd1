// Forms a collective group of three members on a running cluster whose
// workers loaded libgroup_actors.so (one CPU each, four workers), loses one
// (SIGKILL of its machine), sees the others abort, and re-forms the group
// with a replacement:
//
//   group_driver [--head HOST:PORT] [--token-file PATH]
#include <cstdio>
#include <cstring>
#include <vector>

#include "group_actors.h"

using collective_recovery::Member;
using troupe::ActorRef;

namespace {

constexpr int64_t kCount = 1 << 16;

// Declares the group's next generation of `members` and has each join it.
absl::Status form(troupe::Cluster& cluster, const std::vector<ActorRef<Member>>& members) {
  std::vector<troupe::ActorId> ids;
  for (const auto& m : members)
    ids.push_back(m.id());
  auto generation = troupe::declare_collective_group(cluster, "ring", ids);
  if (!generation.ok()) return generation.status();
  std::vector<troupe::Future<int>> joins;
  for (const auto& m : members)
    joins.push_back(m.call(&Member::join, std::string("ring")));
  for (auto& j : joins) {
    if (absl::StatusOr<int> rank = j.get(absl::Seconds(60)); !rank.ok()) return rank.status();
  }
  std::printf("generation %llu formed with %zu members\n",
              static_cast<unsigned long long>(*generation), members.size());
  return absl::OkStatus();
}

int fail(const absl::Status& s) {
  std::printf("group_driver: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  troupe::ClusterOptions options{.name = "collective recovery example"};
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--head")) options.head = argv[i + 1];
    if (!std::strcmp(argv[i], "--token-file")) options.token_file = argv[i + 1];
  }
  auto cluster = troupe::Cluster::connect(options);
  if (!cluster.ok()) return fail(cluster.status());
  // One CPU each, on workers of one CPU: every member on a machine of its own.
  auto spawn = [&] { return (*cluster)->spawn<Member>({.resources = "CPU=1"}); };
  std::vector<ActorRef<Member>> members;
  for (int i = 0; i < 3; ++i) {
    auto m = spawn();
    if (!m.ok()) return fail(m.status());
    members.push_back(*m);
  }
  if (absl::Status s = form(**cluster, members); !s.ok()) return fail(s);
  auto sum_over = [&](const std::vector<ActorRef<Member>>& ms) {
    std::vector<troupe::Future<double>> sums;
    for (const auto& m : ms)
      sums.push_back(m.call(&Member::allreduce, kCount));
    std::vector<absl::StatusOr<double>> out;
    for (auto& s : sums)
      out.push_back(s.get(absl::Seconds(90)));
    return out;
  };
  for (const auto& sum : sum_over(members)) {
    if (!sum.ok() || *sum != 6)
      return fail(sum.ok() ? absl::InternalError("wrong sum") : sum.status());
  }
  std::printf("allreduce: 1 + 2 + 3 = 6 on every rank\n");

  std::printf("SIGKILL the machine of rank 1\n");
  members[1].tell(&Member::crash);
  absl::Time lost = absl::Now();
  for (const auto& sum : sum_over({members[0], members[2]})) {
    if (!absl::IsAborted(sum.status()))
      return fail(absl::InternalError("a survivor did not abort"));
    std::printf("a survivor aborted after %.1f s: %s\n", absl::ToDoubleSeconds(absl::Now() - lost),
                std::string(sum.status().message()).c_str());
  }

  auto replacement = spawn();
  if (!replacement.ok()) return fail(replacement.status());
  members[1] = *replacement;
  if (absl::Status s = form(**cluster, members); !s.ok()) return fail(s);
  for (const auto& sum : sum_over(members)) {
    if (!sum.ok() || *sum != 6)
      return fail(sum.ok() ? absl::InternalError("wrong sum") : sum.status());
  }
  std::printf("allreduce after re-forming: 6 on every rank\n");
  return 0;
}
