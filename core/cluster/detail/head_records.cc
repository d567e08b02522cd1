#include "core/cluster/detail/head_records.h"

#include <cinttypes>
#include <cstdio>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troupe::cluster {
namespace {

std::string hex_name(const char* kind, uint64_t id, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*" PRIx64, width, id);
  return absl::StrCat(kind, buf);
}

template <class T>
absl::Status decode_record(const std::string& name, const std::string& contents, T& out) {
  Reader r(std::span<const std::byte>(reinterpret_cast<const std::byte*>(contents.data()),
                                      contents.size()));
  if (absl::Status s = decode_values(r, out); !s.ok()) {
    return absl::DataLossError(
        absl::StrCat("head record ", name, " does not decode: ", s.message()));
  }
  return absl::OkStatus();
}

// The number after `kind` in `name` ("actor/0000f00d" -> 0xf00d).
absl::Status record_id(const std::string& name, size_t kind_size, uint64_t& id) {
  if (!absl::SimpleHexAtoi(name.substr(kind_size), &id)) {
    return absl::DataLossError(absl::StrCat("head record ", name, " has no id in its name"));
  }
  return absl::OkStatus();
}

// The records under `kind` ("node/"), each decoded into `out[id]`.
template <class Map>
absl::Status load_numbered(HeadStore& store, const std::string& kind, Map& out) {
  auto records = store.read_prefix(kind);
  if (!records.ok()) return records.status();
  for (const auto& [name, contents] : *records) {
    uint64_t id = 0;
    if (absl::Status s = record_id(name, kind.size(), id); !s.ok()) return s;
    auto& value = out[static_cast<typename Map::key_type>(id)];
    if (absl::Status s = decode_record(name, contents, value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The most changes one round of the writer takes: bounds how long the
// first of them waits for the last.
constexpr size_t kMaxBatch = 2000;

}  // namespace

std::string node_record(uint32_t node) {
  return hex_name("node/", node, 8);
}
std::string job_record(uint32_t job) {
  return hex_name("job/", job, 8);
}
std::string actor_record(uint64_t actor) {
  return hex_name("actor/", actor, 16);
}
std::string group_record(uint64_t group) {
  return hex_name("group/", group, 16);
}
std::string kv_record(const std::string& key) {
  return "kv/" + key;
}

absl::StatusOr<HeadRecords> load_head_records(HeadStore& store) {
  HeadRecords out;
  if (!store.keeps_records()) return out;
  if (absl::Status s = load_numbered(store, "node/", out.nodes); !s.ok()) return s;
  if (absl::Status s = load_numbered(store, "job/", out.jobs); !s.ok()) return s;
  if (absl::Status s = load_numbered(store, "actor/", out.actors); !s.ok()) return s;
  if (absl::Status s = load_numbered(store, "group/", out.groups); !s.ok()) return s;
  auto kv = store.read_prefix("kv/");
  if (!kv.ok()) return kv.status();
  for (auto& [name, value] : *kv)
    out.kv.emplace(name.substr(3), std::move(value));
  return out;
}

RecordWriter::RecordWriter(std::shared_ptr<HeadStore> store,
                           std::function<void(absl::Status)> on_failure)
    : store_(std::move(store)),
      keeps_(store_->keeps_records()),
      on_failure_(std::move(on_failure)) {
  if (keeps_) thread_ = std::thread([this] { run(); });
}

RecordWriter::~RecordWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Future<void> RecordWriter::put(std::string name, std::string contents) {
  return queue({std::move(name), std::move(contents)});
}

Future<void> RecordWriter::erase(std::string name) {
  return queue({std::move(name), std::nullopt});
}

Future<void> RecordWriter::queue(StoreChange change) {
  if (!keeps_) return make_ready_future();
  Pending p{std::move(change), Promise<void>()};
  Future<void> done = p.done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.ok()) return Future<void>::failed(failed_);
    if (stop_) return Future<void>::failed(absl::UnavailableError("the head is stopping"));
    queue_.push_back(std::move(p));
  }
  cv_.notify_one();
  return done;
}

uint64_t RecordWriter::changes_committed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return committed_;
}

uint64_t RecordWriter::commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

void RecordWriter::run() {
  for (;;) {
    std::vector<Pending> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, all committed
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // One change per record (a transaction may not name a key twice): the
    // last one made, in the place of the first.
    std::vector<StoreChange> changes;
    absl::flat_hash_map<std::string, size_t> at;
    for (Pending& p : batch) {
      auto [it, fresh] = at.try_emplace(p.change.name, changes.size());
      if (fresh) {
        changes.push_back(p.change);
      } else {
        changes[it->second].contents = p.change.contents;
      }
    }
    absl::Status s = store_->apply(changes);
    bool first_failure = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s.ok()) {
        committed_ += changes.size();
        commits_ +=
            (changes.size() + HeadStore::kMaxChangesPerWrite - 1) / HeadStore::kMaxChangesPerWrite;
      } else if (failed_.ok()) {
        failed_ = s;
        first_failure = true;
        // What is queued behind it fails too: it would be made out of order.
        for (Pending& p : queue_)
          batch.push_back(std::move(p));
        queue_.clear();
      }
    }
    for (Pending& p : batch) {
      if (s.ok()) {
        p.done.set_value();
      } else {
        p.done.set_error(s);
      }
    }
    if (first_failure && on_failure_) on_failure_(s);
  }
}

}  // namespace troupe::cluster
