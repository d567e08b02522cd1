// The rendezvous seam of collective groups (as Gloo's rendezvous/store.h):
// ranks publish their addresses, and later NCCL unique ids, under agreed
// keys and wait for each other's. Core implements it over the head's KV
// store; InMemoryStore serves tests and groups inside one process.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe::transport {

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` (overwriting). Thread-safe.
  virtual absl::Status set(const std::string& key, std::string value) = 0;
  // Waits until `key` is set, or `timeout`: DeadlineExceeded naming the key.
  virtual absl::StatusOr<std::string> wait_get(const std::string& key, absl::Duration timeout) = 0;
};

class InMemoryStore final : public Store {
 public:
  absl::Status set(const std::string& key, std::string value) override;
  absl::StatusOr<std::string> wait_get(const std::string& key, absl::Duration timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace troupe::transport
