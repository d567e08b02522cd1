// Env: the file operations troupe makes - checkpoints, model files, the
// head's state directory - behind one seam (LevelDB's Env), so that tests can
// inject short writes, ENOSPC, fsync failures and crashes between any two
// operations (EnvWrapper forwards everything; a test env overrides what it
// breaks). A leaf library (troupe_io): Abseil and the C++ library only, so
// that core and checkpoint share it and its one atomic write.
//
//   Env* env = Env::posix();
//   absl::Status s = write_file_atomically(env, path, data.data(), data.size());
//
// Every error names the path and carries errno's text; ENOSPC and EDQUOT are
// ResourceExhausted, a missing file NotFound, EACCES and EPERM
// PermissionDenied, an existing one (exclusive create) AlreadyExists, the
// rest Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::io {

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Writes all n bytes at the end of the file (retrying short writes).
  virtual absl::Status append(const void* data, size_t n) = 0;
  // fdatasync: what was appended is on the device.
  virtual absl::Status sync() = 0;
  // Closes the file; later calls fail. The destructor closes an open file,
  // ignoring errors.
  virtual absl::Status close() = 0;
};

class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly n bytes at `offset`; DataLoss naming the file if it ends
  // first (a truncated file).
  virtual absl::Status read(uint64_t offset, size_t n, void* out) const = 0;
  virtual uint64_t size() const = 0;
};

// How Env::new_writable_file creates a file.
struct WriteOptions {
  // false: mode 0644 (less the umask), created or truncated, following a
  // symbolic link at the path. true: a file only this user may use, for
  // secrets and state a process trusts (the head's token and state files):
  // mode 0600, created exclusively (AlreadyExists if anything is at the
  // path), never through a symbolic link.
  bool private_file = false;
};

class Env {
 public:
  virtual ~Env() = default;
  // The process's POSIX env (never null; not owned).
  static Env* posix();

  // Opens `path` for writing, created as `options` says.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> new_writable_file(
      const std::string& path, const WriteOptions& options) = 0;
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> new_random_access_file(
      const std::string& path) = 0;
  // The whole file (small files: manifests, pointers); DataLoss, reading
  // nothing, when it is larger than max_bytes.
  virtual absl::StatusOr<std::string> read_file(const std::string& path,
                                                size_t max_bytes = size_t{1} << 30);
  // rename(2): atomic, replacing `to`.
  virtual absl::Status rename_file(const std::string& from, const std::string& to) = 0;
  virtual absl::Status remove_file(const std::string& path) = 0;
  // fsync of the directory itself, so that the names in it are durable.
  virtual absl::Status sync_dir(const std::string& dir) = 0;
  // mkdir -p.
  virtual absl::Status create_dir(const std::string& dir) = 0;
  // Removes the directory and all it holds; OK if it does not exist.
  virtual absl::Status remove_dir(const std::string& dir) = 0;
  // The names in `dir` (not "." or ".."), sorted; NotFound if it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> children(const std::string& dir) = 0;
  virtual bool exists(const std::string& path) = 0;
};

// Forwards every call to `target` (not owned).
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  absl::StatusOr<std::unique_ptr<WritableFile>> new_writable_file(
      const std::string& path, const WriteOptions& options) override {
    return target_->new_writable_file(path, options);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> new_random_access_file(
      const std::string& path) override {
    return target_->new_random_access_file(path);
  }
  absl::StatusOr<std::string> read_file(const std::string& path, size_t max_bytes) override {
    return target_->read_file(path, max_bytes);
  }
  absl::Status rename_file(const std::string& from, const std::string& to) override {
    return target_->rename_file(from, to);
  }
  absl::Status remove_file(const std::string& path) override { return target_->remove_file(path); }
  absl::Status sync_dir(const std::string& dir) override { return target_->sync_dir(dir); }
  absl::Status create_dir(const std::string& dir) override { return target_->create_dir(dir); }
  absl::Status remove_dir(const std::string& dir) override { return target_->remove_dir(dir); }
  absl::StatusOr<std::vector<std::string>> children(const std::string& dir) override {
    return target_->children(dir);
  }
  bool exists(const std::string& path) override { return target_->exists(path); }

 private:
  Env* target_;
};

// Writes a file atomically: a reader of `path` sees the old file or the new
// one, whole. `write` fills a temporary file beside it (appends only), which
// is then synced, closed and renamed to PATH, and the directory synced. The temporary file is
// PATH.tmp, created or truncated; for a private file (options.private_file) PATH.PID.tmp, where a
// leftover (of a process that died with this pid) is removed first, so that processes writing the
// same file never share one (each creates its own exclusively). Renaming replaces whatever PATH
// names, a symbolic link itself rather than what it points to. On any failure PATH is as it was and
// the temporary file is removed (best effort); the error is the first one met.
absl::Status write_file_atomically(Env* env, const std::string& path,
                                   const std::function<absl::Status(WritableFile&)>& write,
                                   const WriteOptions& options = {});
// The same for `n` bytes at `data`.
absl::Status write_file_atomically(Env* env, const std::string& path, const void* data, size_t n,
                                   const WriteOptions& options = {});

}  // namespace troupe::io
