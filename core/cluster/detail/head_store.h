// Where a head keeps its durable decisions: named records, read when it
// starts and written as it decides. Two kinds:
//
//   the state directory   the ids handed out (HeadIds), one private file, on
//                         the head's machine (the default: a head restarted
//                         there takes over; the rest of what it knew comes
//                         back with the nodes that rejoin it);
//   etcd                  every record (head_records.h: nodes, jobs, actors,
//                         placement groups, the KV store) under a key prefix,
//                         every write fenced by the head's leadership epoch
//                         (EtcdLeadership), so a standby head on another
//                         machine can take over and a deposed one can no
//                         longer write.
//
// Not thread-safe: the head writes from its one actor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/detail/etcd_client.h"

namespace troupe::cluster {

class EtcdLeadership;

// One change to a record: replaced by `contents`, or erased (nullopt).
struct StoreChange {
  std::string name;
  std::optional<std::string> contents;
};

class HeadStore {
 public:
  virtual ~HeadStore() = default;
  // Record `name`; nullopt if it was never written. Errors: those of reading.
  virtual absl::StatusOr<std::optional<std::string>> read(const std::string& name) = 0;
  // Replaces record `name`. Errors: those of writing; with etcd,
  // FailedPrecondition once this head no longer leads (nothing is written).
  virtual absl::Status write(const std::string& name, const std::string& contents) = 0;
  // Where record `name` lives, for messages: "/tmp/troupe/head_ids",
  // "etcd troupe/head/head_ids".
  virtual std::string where(const std::string& name) const = 0;

  // Whether the store keeps the head's records beyond its ids (etcd does;
  // the state directory does not). When false, apply() is never called and
  // read_prefix() finds nothing.
  virtual bool keeps_records() const { return false; }
  // Every record whose name starts with `prefix`, in name order, as (name,
  // contents). Errors: those of reading.
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read_prefix(
      const std::string& prefix) {
    static_cast<void>(prefix);
    return std::vector<std::pair<std::string, std::string>>{};
  }
  // Makes `changes`, each to a different record. With etcd they go in
  // transactions of at most kMaxChangesPerWrite, each all or nothing, each
  // fenced (FailedPrecondition once this head no longer leads), several in
  // flight at once: on an error some may have been made and others not.
  virtual absl::Status apply(const std::vector<StoreChange>& changes) {
    static_cast<void>(changes);
    return absl::UnimplementedError("this store keeps only the head's ids");
  }

  // Below etcd's default limit of operations in a transaction (128).
  static constexpr size_t kMaxChangesPerWrite = 100;
};

// Records as files of `state_dir` (state_dir.h: private, replaced
// atomically); an empty `state_dir` keeps nothing (reads find nothing,
// writes succeed): a head inside a test process.
std::unique_ptr<HeadStore> state_dir_store(std::string state_dir);

// Records as keys `prefix` + name in etcd, written while `leadership` (which
// must outlive the store) leads.
std::unique_ptr<HeadStore> etcd_store(EtcdClient etcd, EtcdLeadership* leadership,
                                      std::string prefix);

}  // namespace troupe::cluster
