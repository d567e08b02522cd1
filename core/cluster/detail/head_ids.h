// The ids a head hands out - node indices, actor sequence numbers and
// placement group ids - kept in its store (its state directory, or etcd:
// head_store.h), so that a head started again there, or a standby that takes
// over, never hands out one its predecessor did: the nodes that rejoin it
// still hold them. Reserved in blocks, so that the record is rewritten when a
// block is used up rather than for every id; a restart skips the rest of the
// block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/cluster/detail/head_records.h"
#include "core/cluster/detail/head_store.h"

namespace troupe::cluster {

class HeadIds {
 public:
  // Ids kept in record "head_ids" of `store`. Errors: those of reading it,
  // and InvalidArgument if it is malformed.
  static absl::StatusOr<HeadIds> open(std::shared_ptr<HeadStore> store);
  // The same in file "head_ids" of `state_dir`; empty: kept nowhere (a head
  // inside a test process).
  static absl::StatusOr<HeadIds> open(std::string state_dir);

  // From now on a new block is reserved through `writer` (when it keeps
  // records) instead of written at once: the head does not wait for it.
  // Safe because the writer commits in order - whatever uses an id is
  // answered after a later change commits, so after the block does - and
  // fails every change after one it could not make.
  void write_through(std::shared_ptr<RecordWriter> writer) { writer_ = std::move(writer); }

  // The next node index (1 to kLastNode). Errors: ResourceExhausted when the
  // store's indices are used up; those of writing the store when a new block
  // is reserved (nothing is handed out then; with etcd, FailedPrecondition
  // once this head no longer leads).
  absl::StatusOr<uint32_t> next_node();
  absl::StatusOr<uint64_t> next_actor();  // sequence numbers from 1
  absl::StatusOr<uint64_t> next_group();  // from 1
  // Ids handed out by an earlier head, reported by a node that rejoins:
  // never handed out again.
  absl::Status saw_node(uint32_t index);
  absl::Status saw_actor(uint64_t sequence);
  absl::Status saw_group(uint64_t id);

 private:
  struct Counter {
    uint64_t next = 1;
    uint64_t reserved = 1;  // ids below this are in the file's block
    uint64_t block = 1;
    uint64_t last = 0;  // the largest valid id
  };
  HeadIds() = default;
  absl::StatusOr<uint64_t> take(Counter& c, const char* what);
  absl::Status see(Counter& c, uint64_t id);
  // Extends c's block in the file if c.next reached its end.
  absl::Status reserve_past_next(Counter& c);
  absl::Status persist();

  std::shared_ptr<HeadStore> store_;
  std::shared_ptr<RecordWriter> writer_;
  Counter nodes_, actors_, groups_;
};

}  // namespace troupe::cluster
