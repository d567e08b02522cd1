// Runs a body on every rank of a collective group at once, each rank a
// thread with a transport of its own, found through an in-memory store (as
// Gloo's test/base_test.h does); and the fixtures of suites parameterised
// over transports, or over the shape of a group: transports x ranks x sizes.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/transport/transport_test_util.h"
#include "transport/collectives/communicator.h"

namespace troupe::transport::testing {

inline std::string collective_listen_address(const std::string& kind, int rank, int run) {
  if (kind == "inproc") return absl::StrCat("inproc://collectives-", run, "-", rank);
  return kind + "://127.0.0.1:0";
}

// Runs `body(comm)` on `n` ranks at once, handing each its communicator;
// returns each rank's status. With hosts > 0, rank r claims to be on host
// r % hosts (for the hierarchical algorithm); with 0 all ranks are on this
// host, and share memory unless `shared_memory` is false. Each rank's
// transport lives until every rank is done.
inline std::vector<absl::Status> run_group_owning(
    const std::string& kind, int n,
    const std::function<absl::Status(std::unique_ptr<Communicator>)>& body, int hosts = 0,
    bool shared_memory = true, absl::Duration timeout = absl::Seconds(30)) {
  static std::atomic<int> runs{0};
  int run = runs.fetch_add(1);
  InMemoryStore store;
  std::vector<absl::Status> results(n);
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto transport = make_transport(kind, options_with(kToken, absl::StrCat("rank ", r)));
      if (!transport.ok()) {
        results[r] = transport.status();
        finished.fetch_add(1);
        return;
      }
      auto comm = Communicator::create(
          **transport, store,
          {.rank = r,
           .size = n,
           .group = absl::StrCat("g", run),
           .listen_address = collective_listen_address(kind, r, run),
           .host = hosts > 0 ? absl::StrCat("host-", r % hosts) : std::string(),
           .timeout = timeout,
           .shared_memory = shared_memory});
      if (!comm.ok()) {
        results[r] = comm.status();
        finished.fetch_add(1);
        return;
      }
      results[r] = body(*std::move(comm));
      // Stay connected until every rank is done: a rank that leaves at once
      // tears down its transport before its last frames are delivered, and
      // the others would rightly see a member lost.
      finished.fetch_add(1);
      absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (finished.load() < n && absl::Now() < deadline)
        std::this_thread::yield();
    });
  }
  for (auto& t : threads)
    t.join();
  return results;
}

// As run_group_owning, for a body that only uses the communicator.
inline std::vector<absl::Status> run_group(const std::string& kind, int n,
                                           const std::function<absl::Status(Communicator&)>& body,
                                           int hosts = 0, bool shared_memory = true,
                                           absl::Duration timeout = absl::Seconds(30)) {
  return run_group_owning(
      kind, n, [&](std::unique_ptr<Communicator> c) { return body(*c); }, hosts, shared_memory,
      timeout);
}

// A case's transport, from kTransports; skipped, saying why, where that
// transport is not available here.
class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::string why = transport_unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  }
};

// "tcp": a TransportTest case's parameter name.
inline std::string transport_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// The shape of the group a case runs on: its transport (from kTransports),
// its number of ranks, and the number of elements each operation moves.
using GroupShape = std::tuple<std::string, int, size_t>;

// A case on one shape of group; skipped, saying why, where its transport is
// not available here.
class GroupShapeTest : public ::testing::TestWithParam<GroupShape> {
 protected:
  void SetUp() override {
    if (std::string why = transport_unavailable(transport()); !why.empty()) GTEST_SKIP() << why;
  }
  const std::string& transport() const { return std::get<0>(GetParam()); }
  int ranks() const { return std::get<1>(GetParam()); }
  size_t count() const { return std::get<2>(GetParam()); }
};

// "tcp_4ranks_1000": a GroupShapeTest case's parameter name, so that one case
// can be run alone (--gtest_filter='*/tcp_4ranks_1000').
inline std::string shape_name(const ::testing::TestParamInfo<GroupShape>& info) {
  const auto& [transport, ranks, count] = info.param;
  return absl::StrCat(transport, "_", ranks, "ranks_", count);
}

}  // namespace troupe::transport::testing
