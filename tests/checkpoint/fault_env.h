// FaultEnv: an io::Env over the POSIX one that breaks on cue, for
// tests (LevelDB's FaultInjectionTestEnv):
//   - crash_at(k): operation k (counting every append, sync, close, rename,
//     remove, mkdir and directory sync from 0) and all after it fail, as if
//     the process had died there; crash() then drops what was appended but
//     not synced, as a power loss would.
//   - enospc_after(n): appends fail with ENOSPC's error once n bytes in all
//     were written (the one that crosses writes what fits: a short write).
//   - fail_sync(k): the k-th sync of a file (from 0) fails with EIO's error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/io/env.h"

namespace troupe::checkpoint::testing {

class FaultEnv : public io::EnvWrapper {
 public:
  FaultEnv() : io::EnvWrapper(io::Env::posix()) {}

  void crash_at(int64_t op) { crash_at_ = op; }
  void enospc_after(int64_t bytes) { enospc_after_ = bytes; }
  void fail_sync(int64_t k) { fail_sync_ = k; }
  int64_t ops() const { return ops_; }
  bool crashed() const { return ops_ > crash_at_; }

  // Truncates every file written through this env to what was last synced.
  void crash() {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [path, synced] : synced_) {
      std::error_code ec;
      if (std::filesystem::exists(path, ec)) std::filesystem::resize_file(path, synced, ec);
    }
  }

  absl::StatusOr<std::unique_ptr<io::WritableFile>> new_writable_file(
      const std::string& path, const io::WriteOptions& options) override {
    if (absl::Status s = op("open " + path); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<io::WritableFile>> f =
        target()->new_writable_file(path, options);
    if (!f.ok()) return f.status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      synced_[path] = 0;
    }
    return std::unique_ptr<io::WritableFile>(new File(this, path, *std::move(f)));
  }
  absl::Status rename_file(const std::string& from, const std::string& to) override {
    if (absl::Status s = op("rename " + from); !s.ok()) return s;
    if (absl::Status s = target()->rename_file(from, to); !s.ok()) return s;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = synced_.find(from);
    if (it != synced_.end()) {
      synced_[to] = it->second;
      synced_.erase(it);
    }
    return absl::OkStatus();
  }
  absl::Status remove_file(const std::string& path) override {
    if (absl::Status s = op("unlink " + path); !s.ok()) return s;
    return target()->remove_file(path);
  }
  absl::Status sync_dir(const std::string& dir) override {
    if (absl::Status s = op("fsync " + dir); !s.ok()) return s;
    return target()->sync_dir(dir);
  }
  absl::Status create_dir(const std::string& dir) override {
    if (absl::Status s = op("mkdir " + dir); !s.ok()) return s;
    return target()->create_dir(dir);
  }
  absl::Status remove_dir(const std::string& dir) override {
    if (absl::Status s = op("rmdir " + dir); !s.ok()) return s;
    return target()->remove_dir(dir);
  }

 private:
  class File : public io::WritableFile {
   public:
    File(FaultEnv* env, std::string path, std::unique_ptr<io::WritableFile> f)
        : env_(env), path_(std::move(path)), f_(std::move(f)) {}
    absl::Status append(const void* data, size_t n) override {
      if (absl::Status s = env_->op("append " + path_); !s.ok()) return s;
      size_t fits = n;
      {
        std::lock_guard<std::mutex> lock(env_->mu_);
        if (env_->enospc_after_ >= 0) {
          const int64_t room = std::max<int64_t>(0, env_->enospc_after_ - env_->written_);
          fits = std::min<size_t>(n, static_cast<size_t>(room));
        }
        env_->written_ += static_cast<int64_t>(fits);
      }
      if (fits > 0) {
        if (absl::Status s = f_->append(data, fits); !s.ok()) return s;
        size_ += fits;
      }
      if (fits < n) {
        return absl::ResourceExhaustedError(
            absl::StrCat(path_, ": write: No space left on device (injected)"));
      }
      return absl::OkStatus();
    }
    absl::Status sync() override {
      if (absl::Status s = env_->op("sync " + path_); !s.ok()) return s;
      {
        std::lock_guard<std::mutex> lock(env_->mu_);
        if (env_->syncs_++ == env_->fail_sync_) {
          return absl::InternalError(
              absl::StrCat(path_, ": fdatasync: Input/output error (injected)"));
        }
      }
      if (absl::Status s = f_->sync(); !s.ok()) return s;
      std::lock_guard<std::mutex> lock(env_->mu_);
      env_->synced_[path_] = size_;
      return absl::OkStatus();
    }
    absl::Status close() override {
      if (absl::Status s = env_->op("close " + path_); !s.ok()) {
        f_->close().IgnoreError();
        return s;
      }
      return f_->close();
    }

   private:
    FaultEnv* env_;
    std::string path_;
    std::unique_ptr<io::WritableFile> f_;
    uint64_t size_ = 0;
  };

  absl::Status op(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ops_++ >= crash_at_) {
      return absl::InternalError(
          absl::StrCat("injected crash at operation ", ops_ - 1, " (", what, ")"));
    }
    return absl::OkStatus();
  }

  std::mutex mu_;
  int64_t ops_ = 0;
  int64_t crash_at_ = INT64_MAX;
  int64_t enospc_after_ = -1;
  int64_t written_ = 0;
  int64_t fail_sync_ = -1;
  int64_t syncs_ = 0;
  std::map<std::string, uint64_t> synced_;  // path -> bytes durable
};

}  // namespace troupe::checkpoint::testing
