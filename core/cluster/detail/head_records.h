// What a head keeps in a store that keeps records (head_store.h: etcd), so
// that a standby taking over knows what the leader had decided: the nodes
// that joined, the jobs, the actors and where they run, the placement groups
// and the KV store. Heartbeats, resource views and the event log stay out:
// they come back with the nodes that rejoin.
//
// Records, by name ("%08x" keeps numeric names in numeric order):
//   node/IIIIIIII     NodeInfo of a live node          (erased when it dies or leaves)
//   job/IIIIIIII      StoredJob of a job              (kept while status() shows it)
//   actor/IIII...     StoredActor of a live actor     (erased when it dies for good)
//   group/IIII...     StoredGroup of a placement group (erased when removed)
//   kv/KEY            the value of KEY in the KV store
//
// RecordWriter commits changes in order, in batches, from a thread of its
// own: the head goes on while etcd commits, and answers a request that
// changed a record once the change is committed (an acknowledged write is
// never lost to a failover).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/detail/head_store.h"
#include "core/cluster/protocol.h"
#include "core/future.h"

namespace troupe::cluster {

struct StoredJob {
  NodeInfo driver;
  JobState state = JobState::kRunning;
  std::string end_reason;
  TROUPE_FIELDS(driver, state, end_reason);
};

struct StoredActor {
  SpawnRequest spawn;  // owner, name and resources included
  uint32_t job = 0;
  uint32_t node = 0;  // where it was last hosted
  int32_t restarts = 0;
  TROUPE_FIELDS(spawn, job, node, restarts);
};

struct StoredGroup {
  std::vector<std::string> bundles;  // "CPU=1,GPU=1"
  std::string strategy;
  std::string name;
  uint32_t job = 0;             // 0: detached
  std::vector<uint32_t> nodes;  // each bundle's, once placed; empty while pending
  TROUPE_FIELDS(bundles, strategy, name, job, nodes);
};

std::string node_record(uint32_t node);
std::string job_record(uint32_t job);
std::string actor_record(uint64_t actor);
std::string group_record(uint64_t group);
std::string kv_record(const std::string& key);

// A record's contents: the Codec encoding of `value`.
template <class T>
std::string encode_record(const T& value) {
  Writer w;
  w.write(value);
  const std::vector<std::byte>& b = w.bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Everything a head reads from its store when it takes over.
struct HeadRecords {
  std::map<uint32_t, NodeInfo> nodes;
  std::map<uint32_t, StoredJob> jobs;
  std::map<uint64_t, StoredActor> actors;
  std::map<uint64_t, StoredGroup> groups;
  std::map<std::string, std::string> kv;
};

// Reads them (nothing from a store that keeps none). Errors: those of
// reading, and DataLoss naming a record that does not decode.
absl::StatusOr<HeadRecords> load_head_records(HeadStore& store);

class RecordWriter {
 public:
  // Commits to `store` (which must outlive the writer). `on_failure` runs
  // once, on the writer's thread, when a commit fails: the head no longer
  // leads, or the store is unreachable; every change from then on fails.
  // A store that keeps no records commits nothing: changes succeed at once.
  RecordWriter(std::shared_ptr<HeadStore> store, std::function<void(absl::Status)> on_failure);
  // Commits what is queued, then stops.
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  bool keeps_records() const { return keeps_; }
  // Queues a change to record `name` (nullopt: erase it); the future
  // completes once it is committed, with the store's error if it was not.
  Future<void> put(std::string name, std::string contents);
  Future<void> erase(std::string name);
  // Changes committed, and commits (transactions) made.
  uint64_t changes_committed() const;
  uint64_t commits() const;

 private:
  struct Pending {
    StoreChange change;
    Promise<void> done;
  };
  Future<void> queue(StoreChange change);
  void run();

  const std::shared_ptr<HeadStore> store_;
  const bool keeps_;
  const std::function<void(absl::Status)> on_failure_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;  // guarded by mu_
  absl::Status failed_;        // guarded by mu_
  bool stop_ = false;          // guarded by mu_
  uint64_t committed_ = 0;     // guarded by mu_
  uint64_t commits_ = 0;       // guarded by mu_
  std::thread thread_;
};

}  // namespace troupe::cluster
