#include "core/cluster/detail/head_store.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cluster/detail/etcd_leadership.h"
#include "core/cluster/detail/state_dir.h"

namespace troupe::cluster {
namespace {

class StateDirStore final : public HeadStore {
 public:
  explicit StateDirStore(std::string dir) : dir_(std::move(dir)) {}

  absl::StatusOr<std::optional<std::string>> read(const std::string& name) override {
    if (dir_.empty()) return std::nullopt;
    absl::StatusOr<std::string> text = read_state_file(dir_, name);
    if (absl::IsNotFound(text.status())) return std::nullopt;
    if (!text.ok()) return text.status();
    return *std::move(text);
  }
  absl::Status write(const std::string& name, const std::string& contents) override {
    if (dir_.empty()) return absl::OkStatus();
    return write_state_file(dir_, name, contents);
  }
  std::string where(const std::string& name) const override {
    return absl::StrCat(dir_, "/", name);
  }

 private:
  const std::string dir_;
};

class EtcdStore final : public HeadStore {
 public:
  // Transactions of one apply() in flight at once.
  static constexpr size_t kConcurrentWrites = 8;

  EtcdStore(EtcdClient etcd, EtcdLeadership* leadership, std::string prefix)
      : etcd_(std::move(etcd)), leadership_(leadership), prefix_(std::move(prefix)) {}

  absl::StatusOr<std::optional<std::string>> read(const std::string& name) override {
    absl::StatusOr<std::optional<EtcdKv>> kv = etcd_.get(prefix_ + name);
    if (!kv.ok()) return kv.status();
    if (!kv->has_value()) return std::nullopt;
    return (*kv)->value;
  }
  absl::Status write(const std::string& name, const std::string& contents) override {
    return leadership_->write({EtcdOp::put(prefix_ + name, contents)}).status();
  }
  std::string where(const std::string& name) const override {
    return absl::StrCat("etcd ", prefix_, name);
  }
  bool keeps_records() const override { return true; }
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> read_prefix(
      const std::string& prefix) override {
    absl::StatusOr<std::vector<EtcdKv>> kvs = etcd_.get_prefix(prefix_ + prefix);
    if (!kvs.ok()) return kvs.status();
    std::vector<std::pair<std::string, std::string>> out;
    out.reserve(kvs->size());
    for (EtcdKv& kv : *kvs)
      out.emplace_back(kv.key.substr(prefix_.size()), std::move(kv.value));
    return out;
  }
  absl::Status apply(const std::vector<StoreChange>& changes) override {
    std::vector<std::vector<EtcdOp>> chunks;
    for (size_t i = 0; i < changes.size(); ++i) {
      if (i % kMaxChangesPerWrite == 0) chunks.emplace_back();
      const StoreChange& c = changes[i];
      chunks.back().push_back(c.contents ? EtcdOp::put(prefix_ + c.name, *c.contents)
                                         : EtcdOp::delete_key(prefix_ + c.name));
    }
    if (chunks.size() == 1) return leadership_->write(std::move(chunks[0])).status();
    // Several at once (the records are distinct, so their order does not
    // matter): etcd commits concurrent transactions together, one fsync for
    // several.
    std::vector<absl::Status> results(chunks.size());
    for (size_t first = 0; first < chunks.size(); first += kConcurrentWrites) {
      std::vector<std::thread> writers;
      for (size_t i = first; i < std::min(chunks.size(), first + kConcurrentWrites); ++i) {
        writers.emplace_back(
            [&, i] { results[i] = leadership_->write(std::move(chunks[i])).status(); });
      }
      for (std::thread& w : writers)
        w.join();
    }
    for (const absl::Status& r : results) {
      if (!r.ok()) return r;
    }
    return absl::OkStatus();
  }

 private:
  EtcdClient etcd_;
  EtcdLeadership* const leadership_;
  const std::string prefix_;
};

}  // namespace

std::unique_ptr<HeadStore> state_dir_store(std::string state_dir) {
  return std::make_unique<StateDirStore>(std::move(state_dir));
}

std::unique_ptr<HeadStore> etcd_store(EtcdClient etcd, EtcdLeadership* leadership,
                                      std::string prefix) {
  return std::make_unique<EtcdStore>(std::move(etcd), leadership, std::move(prefix));
}

}  // namespace troupe::cluster
