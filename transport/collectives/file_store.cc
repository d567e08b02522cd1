#include "transport/collectives/file_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace troupe::transport {
namespace {

constexpr size_t kMaxFileName = 255;  // NAME_MAX on Linux file systems
constexpr absl::Duration kFirstBackoff = absl::Microseconds(100);
constexpr absl::Duration kMaxBackoff = absl::Milliseconds(10);

bool kept_as_is(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

absl::Status write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(std::strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// The whole file at `fd`, or the errno of the failed read.
absl::StatusOr<std::string> read_all(int fd) {
  std::string out;
  char chunk[4096];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(std::strerror(errno));
    if (n == 0) return out;
    out.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {}

std::string FileStore::file_name_of(std::string_view key) {
  if (key.empty()) return "%";
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size());
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    if (kept_as_is(c)) {
      name.push_back(ch);
    } else {
      name.push_back('%');
      name.push_back(kHex[c >> 4]);
      name.push_back(kHex[c & 0xf]);
    }
  }
  return name;
}

absl::StatusOr<std::string> FileStore::path_of(const std::string& key) const {
  std::string name = file_name_of(key);
  if (name.size() > kMaxFileName) {
    return absl::InvalidArgumentError(
        absl::StrCat("file store ", directory_, ": key '", key, "' is too long for a file name (",
                     name.size(), " bytes escaped, at most ", kMaxFileName, "); use shorter keys"));
  }
  return absl::StrCat(directory_, "/", name);
}

absl::Status FileStore::set(const std::string& key, std::string value) {
  absl::StatusOr<std::string> path = path_of(key);
  if (!path.ok()) return path.status();
  std::string temp =
      absl::StrCat(directory_, "/.tmp-", ::getpid(), "-", temp_counter_.fetch_add(1));
  auto failed = [&](const std::string& step, const std::string& why) {
    return absl::InternalError(absl::StrCat("file store ", directory_, ": cannot set '", key, "' (",
                                            step, ": ", why,
                                            "); is the directory there and writable?"));
  };
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return failed(absl::StrCat("create ", temp), std::strerror(errno));
  absl::Status written = write_all(fd, value);
  if (::close(fd) != 0 && written.ok()) written = absl::InternalError(std::strerror(errno));
  if (!written.ok()) {
    ::unlink(temp.c_str());
    return failed(absl::StrCat("write ", temp), std::string(written.message()));
  }
  if (std::rename(temp.c_str(), path->c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return failed(absl::StrCat("rename to ", *path), std::strerror(err));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::wait_get(const std::string& key, absl::Duration timeout) {
  absl::StatusOr<std::string> path = path_of(key);
  if (!path.ok()) return path.status();
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = kFirstBackoff;
  // Bounded by the deadline: every round that finds no file sleeps until the
  // next backoff step or the deadline, whichever is first.
  for (;;) {
    int fd = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      absl::StatusOr<std::string> value = read_all(fd);
      ::close(fd);
      if (!value.ok()) {
        return absl::InternalError(absl::StrCat("file store ", directory_, ": cannot read '", key,
                                                "' from ", *path, ": ", value.status().message()));
      }
      return value;
    }
    if (errno != ENOENT) {
      return absl::InternalError(absl::StrCat("file store ", directory_, ": cannot open '", key,
                                              "' at ", *path, ": ", std::strerror(errno)));
    }
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous: '", key, "' was not set within ", absl::FormatDuration(timeout),
          " (file store ", directory_, "); did every rank start with the same directory?"));
    }
    absl::SleepFor(std::min(backoff, left));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace troupe::transport
