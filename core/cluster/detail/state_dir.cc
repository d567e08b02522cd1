#include "core/cluster/detail/state_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/io/env.h"
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

// The state directory's files are private files of the Env (io::WriteOptions).
constexpr io::WriteOptions kPrivate = {.private_file = true};

// `s` (an error of the Env, which names the file and the call that failed)
// prefixed with what was being done.
absl::Status while_doing(const std::string& what, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
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

// Creates file `name` in `dir` (nothing may be there; a symbolic link there
// is not followed) with mode 0600 and writes, syncs and closes `contents`;
// removes it again if any of that fails. Unlike write_state_file, for a file
// that is never replaced: a second writer fails instead of replacing it.
absl::Status create_private_file(const std::string& dir, const std::string& name,
                                 const std::string& contents) {
  io::Env* env = io::Env::posix();
  const std::string path = path_in(dir, name);
  absl::StatusOr<std::unique_ptr<io::WritableFile>> f = env->new_writable_file(path, kPrivate);
  if (!f.ok()) return while_doing(absl::StrCat("cannot create ", path), f.status());
  absl::Status s = (*f)->append(contents.data(), contents.size());
  if (s.ok()) s = (*f)->sync();
  if (s.ok()) s = (*f)->close();
  if (s.ok()) s = env->sync_dir(dir);
  if (!s.ok()) {
    f->reset();
    env->remove_file(path).IgnoreError();
    return while_doing(absl::StrCat("cannot write ", path), s);
  }
  return absl::OkStatus();
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
  if (absl::Status s = create_private_file(dir, kTokenFile, token + "\n"); !s.ok()) return s;
  *fresh = true;
  return token;
}

absl::Status write_state_file(const std::string& dir, const std::string& name,
                              const std::string& contents) {
  const std::string path = path_in(dir, name);
  absl::Status s =
      io::write_file_atomically(io::Env::posix(), path, contents.data(), contents.size(), kPrivate);
  if (!s.ok()) return while_doing(absl::StrCat("cannot replace ", path), s);
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_state_file(const std::string& dir, const std::string& name) {
  return read_private_file(path_in(dir, name));
}

void remove_state_file(const std::string& dir, const std::string& name) {
  io::Env::posix()->remove_file(path_in(dir, name)).IgnoreError();  // it may not exist
}

}  // namespace troupe::cluster
