#include "transport/collectives/hierarchical.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "transport/collectives/halving_doubling.h"
#include "transport/collectives/ring.h"

namespace troupe::transport::detail {
namespace {

// Phases, relative to the one the caller gives.
constexpr int kGather = 0;   // ranks -> their host's leader
constexpr int kLeaders = 1;  // the leaders' allreduce (up to 4 phases)
constexpr int kScatter = 5;  // leader -> its host's ranks

// Below this, the leaders use halving-doubling rather than the ring.
constexpr size_t kLeaderRingBytes = 64 * 1024;

}  // namespace

std::vector<std::vector<int>> ranks_by_host(const std::vector<std::string>& hosts) {
  std::vector<std::vector<int>> groups;
  std::map<std::string, size_t> index;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    auto [it, added] = index.try_emplace(hosts[r], groups.size());
    if (added) groups.emplace_back();
    groups[it->second].push_back(r);
  }
  return groups;
}

absl::Status hierarchical_allreduce(Communicator& comm, DType type, ReduceOp op, void* data,
                                    size_t count, uint64_t sequence, int phase,
                                    BorrowedSends& first_sends, BorrowedSends& sends) {
  if (comm.size() == 1 || count == 0) return absl::OkStatus();
  const size_t width = element_size(type);
  const size_t bytes = count * width;
  const std::vector<std::vector<int>> hosts = ranks_by_host(comm.hosts());
  std::vector<int> leaders;
  const std::vector<int>* mine = nullptr;
  for (const auto& host : hosts) {
    leaders.push_back(host.front());
    if (std::find(host.begin(), host.end(), comm.rank()) != host.end()) mine = &host;
  }
  const int leader = mine->front();
  if (comm.rank() != leader) {
    // The leader reads this copy, then overwrites it with the result.
    if (absl::Status s = comm.send(leader, tag_of(sequence, phase + kGather, 0),
                                   first_sends.borrow(data, bytes));
        !s.ok()) {
      return s;
    }
    absl::StatusOr<Buffer> in =
        recv_exactly(comm, leader, tag_of(sequence, phase + kScatter, 0), bytes);
    if (!in.ok()) return in.status();
    if (absl::Status s = first_sends.wait(comm.timeout()); !s.ok()) return s;
    std::memcpy(data, in->data(), bytes);
    return absl::OkStatus();
  }
  // The leader: one pass over every local rank's data, in rank order.
  std::vector<Buffer> local;
  std::vector<const void*> sources;
  for (size_t i = 1; i < mine->size(); ++i) {
    absl::StatusOr<Buffer> in =
        recv_exactly(comm, (*mine)[i], tag_of(sequence, phase + kGather, 0), bytes);
    if (!in.ok()) return in.status();
    sources.push_back(in->data());
    local.push_back(*std::move(in));
  }
  reduce_many(type, op, data, sources.data(), sources.size(), count);
  local.clear();
  const int me =
      static_cast<int>(std::find(leaders.begin(), leaders.end(), leader) - leaders.begin());
  const Members across{leaders, me};
  absl::Status s = bytes < kLeaderRingBytes
                       ? halving_doubling_allreduce(comm, across, type, op, data, count, sequence,
                                                    phase + kLeaders)
                       : ring_allreduce(comm, across, type, op, data, count, sequence,
                                        phase + kLeaders, first_sends, sends);
  if (!s.ok()) return s;
  for (size_t i = 1; i < mine->size(); ++i) {
    s = comm.send((*mine)[i], tag_of(sequence, phase + kScatter, 0), sends.borrow(data, bytes));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace troupe::transport::detail
