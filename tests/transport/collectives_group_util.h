// Runs a body on every rank of a collective group at once, each rank a
// thread with a transport of its own, found through an in-memory store.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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
// host. Each rank's transport lives until every rank is done.
inline std::vector<absl::Status> run_group_owning(
    const std::string& kind, int n,
    const std::function<absl::Status(std::unique_ptr<Communicator>)>& body, int hosts = 0) {
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
           .timeout = absl::Seconds(30)});
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
                                           int hosts = 0) {
  return run_group_owning(
      kind, n, [&](std::unique_ptr<Communicator> c) { return body(*c); }, hosts);
}

}  // namespace troupe::transport::testing
