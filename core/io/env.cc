#include "core/io/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace troupe::io {
namespace {

absl::Status io_error(const std::string& path, const char* what, int err) {
  std::string text = absl::StrCat(path, ": ", what, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(text);
  if (err == ENOENT) return absl::NotFoundError(text);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(text);
  if (err == EEXIST) return absl::AlreadyExistsError(text);
  return absl::InternalError(text);
}

// Appended bytes are handed to the device's writeback every kWritebackBytes
// (sync_file_range, which does not wait), so the final fdatasync finds
// little left to write: copying into the page cache and writing to the
// device overlap (RocksDB's bytes_per_sync).
constexpr uint64_t kWritebackBytes = 8 << 20;

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status append(const void* data, size_t n) override {
    if (fd_ < 0) return absl::FailedPreconditionError(path_ + ": append after close");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      // At most 1 GiB a call: Linux writes no more than about 2 GiB at once.
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return io_error(path_, "write", errno);
      }
      if (w == 0) return io_error(path_, "write", ENOSPC);
      p += w;
      n -= static_cast<size_t>(w);
      size_ += static_cast<uint64_t>(w);
    }
    if (size_ - written_back_ >= kWritebackBytes) {
      // Best effort: a file system without it writes back at fdatasync.
      ::sync_file_range(fd_, static_cast<off_t>(written_back_),
                        static_cast<off_t>(size_ - written_back_), SYNC_FILE_RANGE_WRITE);
      written_back_ = size_;
    }
    return absl::OkStatus();
  }

  absl::Status sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(path_ + ": sync after close");
    if (::fdatasync(fd_) != 0) return io_error(path_, "fdatasync", errno);
    return absl::OkStatus();
  }

  absl::Status close() override {
    if (fd_ < 0) return absl::FailedPreconditionError(path_ + ": closed twice");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return io_error(path_, "close", errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
  uint64_t size_ = 0;
  uint64_t written_back_ = 0;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  absl::Status read(uint64_t offset, size_t n, void* out) const override {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r =
          ::pread(fd_, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        return io_error(path_, "read", errno);
      }
      if (r == 0) {
        return absl::DataLossError(
            absl::StrCat(path_, ": ends at byte ", offset, ", ", n, " bytes short (truncated?)"));
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
    return absl::OkStatus();
  }
  uint64_t size() const override { return size_; }

 private:
  std::string path_;
  int fd_;
  uint64_t size_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> new_writable_file(
      const std::string& path, const WriteOptions& options) override {
    // O_EXCL fails on a symbolic link at the path too; O_NOFOLLOW says so twice.
    const int fd =
        options.private_file
            ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
            : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error(path, "open", errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> new_random_access_file(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error(path, "open", errno);
    struct stat st = {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return io_error(path, "stat", err);
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(path, fd, static_cast<uint64_t>(st.st_size)));
  }

  absl::Status rename_file(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return io_error(from, absl::StrCat("rename to ", to).c_str(), errno);
    }
    return absl::OkStatus();
  }

  absl::Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return io_error(path, "unlink", errno);
    return absl::OkStatus();
  }

  absl::Status sync_dir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return io_error(dir, "open", errno);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return io_error(dir, "fsync", err);
    return absl::OkStatus();
  }

  absl::Status create_dir(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return io_error(dir, "mkdir", ec.value());
    return absl::OkStatus();
  }

  absl::Status remove_dir(const std::string& dir) override {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) return io_error(dir, "remove", ec.value());
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> children(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return io_error(dir, "opendir", errno);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }
};

}  // namespace

Env* Env::posix() {
  static Env* const env = new PosixEnv;
  return env;
}

absl::StatusOr<std::string> Env::read_file(const std::string& path, size_t max_bytes) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> f = new_random_access_file(path);
  if (!f.ok()) return f.status();
  if ((*f)->size() > max_bytes) {
    return absl::DataLossError(
        absl::StrCat(path, ": ", (*f)->size(), " bytes, more than the ", max_bytes, " expected"));
  }
  std::string text((*f)->size(), '\0');
  if (absl::Status s = (*f)->read(0, text.size(), text.data()); !s.ok()) return s;
  return text;
}

absl::Status write_file_atomically(Env* env, const std::string& path,
                                   const std::function<absl::Status(WritableFile&)>& write,
                                   const WriteOptions& options) {
  std::string tmp = path + ".tmp";
  if (options.private_file) {
    tmp = absl::StrCat(path, ".", ::getpid(), ".tmp");
    env->remove_file(tmp).IgnoreError();  // a leftover, if any
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> f = env->new_writable_file(tmp, options);
  if (!f.ok()) return f.status();  // nothing of ours to remove
  absl::Status written = [&]() -> absl::Status {
    if (absl::Status s = write(**f); !s.ok()) return s;
    if (absl::Status s = (*f)->sync(); !s.ok()) return s;
    if (absl::Status s = (*f)->close(); !s.ok()) return s;
    return env->rename_file(tmp, path);
  }();
  if (!written.ok()) {
    f->reset();
    env->remove_file(tmp).IgnoreError();  // it may be gone
    return written;
  }
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return env->sync_dir(dir.empty() ? "." : dir);
}

absl::Status write_file_atomically(Env* env, const std::string& path, const void* data, size_t n,
                                   const WriteOptions& options) {
  return write_file_atomically(
      env, path, [&](WritableFile& f) { return f.append(data, n); }, options);
}

}  // namespace troupe::io
