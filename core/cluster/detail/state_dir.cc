#include "core/cluster/detail/state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "transport/auth.h"

namespace troupe::cluster {
namespace {

constexpr size_t kMaxStateFile = 64 << 10;
constexpr char kTokenFile[] = "token";

std::string path_in(const std::string& dir, const std::string& name) {
  return dir + "/" + name;
}

std::string errno_text() {
  return std::strerror(errno);
}

// Writes all of `data` to `fd`.
absl::Status write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", errno_text()));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

// Checks an open state file: a regular file of ours that nobody else may read.
absl::Status check_private_file(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot inspect ", path, ": ", errno_text()));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(path, " is not a regular file"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " belongs to another user (uid ", st.st_uid, ")"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s is readable or writable by others (mode %04o); chmod 600 it", path, st.st_mode & 0777));
  }
  return absl::OkStatus();
}

// Opens `path` for reading without following a symbolic link.
absl::StatusOr<int> open_no_follow(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
  if (errno == ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is a symbolic link; refusing to follow it (remove it)"));
  }
  return absl::PermissionDeniedError(absl::StrCat("cannot open ", path, ": ", errno_text()));
}

absl::StatusOr<std::string> read_fd(int fd, const std::string& path) {
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::InternalError(absl::StrCat("cannot read ", path, ": ", errno_text()));
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > kMaxStateFile) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " is larger than ", kMaxStateFile, " bytes: not a state file"));
    }
  }
}

// Creates `path` (it must not exist; a symbolic link there is not
// followed) with mode 0600 and writes, syncs and closes `contents`; removes
// it again if any of that fails.
absl::Status create_private_file(const std::string& path, const std::string& contents) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", path, ": ", errno_text()));
  }
  absl::Status s = write_all(fd, contents, path);
  if (s.ok() && ::fsync(fd) != 0) {
    s = absl::InternalError(absl::StrCat("cannot sync ", path, ": ", errno_text()));
  }
  if (::close(fd) != 0 && s.ok()) {
    s = absl::InternalError(absl::StrCat("cannot write ", path, ": ", errno_text()));
  }
  if (!s.ok()) ::unlink(path.c_str());
  return s;
}

// Reads `path`, a state file: not through a symbolic link, and only if it is
// a regular file of ours that nobody else may read. NotFound if absent.
absl::StatusOr<std::string> read_private_file(const std::string& path) {
  absl::StatusOr<int> fd = open_no_follow(path);
  if (!fd.ok()) return fd.status();
  absl::Status checked = check_private_file(*fd, path);
  absl::StatusOr<std::string> text =
      checked.ok() ? read_fd(*fd, path) : absl::StatusOr<std::string>(checked);
  ::close(*fd);
  return text;
}

bool is_token(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

absl::Status prepare_state_dir(const std::string& dir) {
  if (dir.empty()) {
    return absl::InvalidArgumentError("--state-dir is empty: name a directory, e.g. /tmp/troupe");
  }
  std::string path;
  for (absl::string_view part : absl::StrSplit(dir, '/')) {
    path += std::string(part) + "/";
    if (part.empty()) continue;
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create the state directory ", dir, ": ", errno_text()));
    }
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot inspect the state directory ", dir, ": ", errno_text()));
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the state directory ", dir, " is a symbolic link; name the directory itself"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the state directory ", dir, " is not a directory"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("the state directory ", dir,
                                                    " belongs to another user (uid ", st.st_uid,
                                                    "); choose another with --state-dir"));
  }
  if ((st.st_mode & 022) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "the state directory %s is writable by others (mode %04o), who could replace the "
        "token; chmod 700 it or choose another with --state-dir",
        dir, st.st_mode & 0777));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> load_or_create_token(const std::string& dir, bool* fresh) {
  std::string path = path_in(dir, kTokenFile);
  absl::StatusOr<std::string> text = read_private_file(path);
  if (text.ok()) {
    std::string token(absl::StripAsciiWhitespace(*text));
    if (!is_token(token)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " does not hold a cluster token (64 hex digits); remove it"));
    }
    *fresh = false;
    return token;
  }
  if (!absl::IsNotFound(text.status())) return text.status();
  std::string token = transport::generate_token();
  if (absl::Status s = create_private_file(path, token + "\n"); !s.ok()) return s;
  *fresh = true;
  return token;
}

absl::Status write_state_file(const std::string& dir, const std::string& name,
                              const std::string& contents) {
  std::string path = path_in(dir, name);
  std::string temp = absl::StrCat(path, ".", ::getpid(), ".tmp");
  ::unlink(temp.c_str());  // a leftover of a crashed process with this pid
  if (absl::Status s = create_private_file(temp, contents); !s.ok()) return s;
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status s = absl::InternalError(absl::StrCat("cannot replace ", path, ": ", errno_text()));
    ::unlink(temp.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_state_file(const std::string& dir, const std::string& name) {
  return read_private_file(path_in(dir, name));
}

void remove_state_file(const std::string& dir, const std::string& name) {
  ::unlink(path_in(dir, name).c_str());
}

}  // namespace troupe::cluster
