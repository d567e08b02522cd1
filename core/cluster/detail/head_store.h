// Where a head keeps its durable decisions: named records, read when it
// starts and written as it decides (today the ids it hands out: HeadIds).
// Two kinds:
//
//   the state directory   one private file per record, on the head's machine
//                         (the default: a head restarted there takes over);
//   etcd                  records under a key prefix, every write fenced by
//                         the head's leadership epoch (EtcdLeadership), so a
//                         standby head on another machine can take over and a
//                         deposed one can no longer write.
//
// Not thread-safe: the head writes from its one actor.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/cluster/detail/etcd_client.h"

namespace troupe::cluster {

class EtcdLeadership;

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
