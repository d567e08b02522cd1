// A rendezvous Store over a directory that the processes of a group share on
// one host (as Gloo's rendezvous/file_store.h): ranks started as separate
// processes - a benchmark's children, a test's forked ranks - meet without a
// head.
//
// Each key is one file in the directory, named by escaping the key (see
// file_name_of). set() writes the value to a temporary file there and renames
// it into place, so a reader sees either no file or the whole value, never a
// partial one; wait_get() polls for the file with a backoff of 100 us doubling
// to 10 ms. Temporary names begin with '.', which no escaped key does.
//
// The directory must exist and be writable by every process of the group; the
// store neither creates nor removes it, and never deletes keys (use a fresh
// directory, or fresh group names, for a fresh rendezvous). Thread-safe, and
// safe across processes.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/collectives/store.h"

namespace troupe::transport {

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory);

  // Atomically replaces the file of `key` with `value`. Errors: Internal
  // naming the directory, the key and the system's reason (a missing or
  // read-only directory, a full disk); InvalidArgument for a key whose file
  // name would be too long (over 255 bytes once escaped).
  absl::Status set(const std::string& key, std::string value) override;
  // The value of `key` once its file exists. Errors: DeadlineExceeded naming
  // the key and the directory when it does not appear within `timeout`;
  // Internal when the file exists but cannot be read.
  absl::StatusOr<std::string> wait_get(const std::string& key, absl::Duration timeout) override;

  const std::string& directory() const { return directory_; }

  // The file name `key` is stored under: ASCII letters, digits, '-' and '_'
  // stand for themselves, every other byte ('/', '%', '.', ...) becomes %XX
  // (upper-case hex). Distinct keys give distinct names; the empty key is "%".
  static std::string file_name_of(std::string_view key);

 private:
  absl::StatusOr<std::string> path_of(const std::string& key) const;

  const std::string directory_;
  std::atomic<uint64_t> temp_counter_{0};  // temporary names unique in the process
};

}  // namespace troupe::transport
