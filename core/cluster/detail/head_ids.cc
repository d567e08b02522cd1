#include "core/cluster/detail/head_ids.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/cluster/protocol.h"
#include "core/ids.h"

namespace troupe::cluster {
namespace {

constexpr char kFile[] = "head_ids";

}  // namespace

absl::StatusOr<HeadIds> HeadIds::open(std::string state_dir) {
  return open(std::shared_ptr<HeadStore>(state_dir_store(std::move(state_dir))));
}

absl::StatusOr<HeadIds> HeadIds::open(std::shared_ptr<HeadStore> store) {
  HeadIds ids;
  ids.store_ = std::move(store);
  ids.nodes_ = {.block = 16, .last = kLastNode};
  ids.actors_ = {.block = 1 << 16, .last = (uint64_t{1} << ActorId::kSequenceBits) - 1};
  ids.groups_ = {.block = 1 << 10, .last = UINT64_MAX - (1 << 10)};
  absl::StatusOr<std::optional<std::string>> text = ids.store_->read(kFile);
  if (!text.ok()) return text.status();
  if (!text->has_value()) return ids;
  // "node N", "actor N", "group N": the end of each block an earlier head reserved.
  for (absl::string_view line : absl::StrSplit(**text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    uint64_t value = 0;
    Counter* c = kv.first == "node"    ? &ids.nodes_
                 : kv.first == "actor" ? &ids.actors_
                 : kv.first == "group" ? &ids.groups_
                                       : nullptr;
    if (c == nullptr || !absl::SimpleAtoi(kv.second, &value) || value < 1 || value > c->last + 1) {
      return absl::InvalidArgumentError(absl::StrCat(ids.store_->where(kFile), ": malformed line '",
                                                     std::string(line),
                                                     "' (remove it to start afresh)"));
    }
    c->next = c->reserved = value;
  }
  return ids;
}

absl::StatusOr<uint64_t> HeadIds::take(Counter& c, const char* what) {
  if (c.next > c.last) {
    return absl::ResourceExhaustedError(absl::StrCat(
        store_->where(kFile), ": the ", what,
        " ids are used up; start the head on a fresh --state-dir (with etcd, a fresh key prefix)"));
  }
  if (absl::Status s = reserve_past_next(c); !s.ok()) return s;
  return c.next++;
}

absl::Status HeadIds::reserve_past_next(Counter& c) {
  if (c.next < c.reserved) return absl::OkStatus();
  uint64_t before = c.reserved;
  c.reserved = std::min(c.next + c.block, c.last + 1);
  absl::Status s = persist();
  if (!s.ok()) c.reserved = before;
  return s;
}

absl::Status HeadIds::see(Counter& c, uint64_t id) {
  if (id < c.next) return absl::OkStatus();
  c.next = std::min(id + 1, c.last + 1);
  return reserve_past_next(c);
}

absl::StatusOr<uint32_t> HeadIds::next_node() {
  absl::StatusOr<uint64_t> id = take(nodes_, "node");
  if (!id.ok()) return id.status();
  return static_cast<uint32_t>(*id);
}
absl::StatusOr<uint64_t> HeadIds::next_actor() {
  return take(actors_, "actor");
}
absl::StatusOr<uint64_t> HeadIds::next_group() {
  return take(groups_, "placement group");
}
absl::Status HeadIds::saw_node(uint32_t index) {
  return see(nodes_, index);
}
absl::Status HeadIds::saw_actor(uint64_t sequence) {
  return see(actors_, sequence);
}
absl::Status HeadIds::saw_group(uint64_t id) {
  return see(groups_, id);
}

absl::Status HeadIds::persist() {
  std::string text = absl::StrCat("node ", nodes_.reserved, "\nactor ", actors_.reserved,
                                  "\ngroup ", groups_.reserved, "\n");
  if (writer_ && writer_->keeps_records()) {
    Future<void> queued = writer_->put(kFile, std::move(text));
    // Failed at once only when the writer has failed already.
    if (queued.ready()) return queued.get();
    return absl::OkStatus();
  }
  return store_->write(kFile, text);
}

}  // namespace troupe::cluster
