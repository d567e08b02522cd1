#include "core/cluster/actor_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/actor_type.h"
#include "spdlog/spdlog.h"

// Identifies this copy of libtroupe_core: a library built against another
// troupe (another soname, loaded beside this one) resolves the name elsewhere,
// and registers its actor types in that copy's registry, not the process's.
extern "C" {
extern const char troupe_core_instance;
const char troupe_core_instance = 0;
}

namespace troupe::cluster {
namespace {

namespace fs = std::filesystem;

struct Libraries {
  std::mutex mu;  // held while a library loads: one load at a time
  // Resolved path -> the actor types it registered.
  std::map<std::string, std::vector<std::string>> loaded;
};

Libraries& libraries() {
  static Libraries* l = new Libraries;  // never destroyed, as the libraries are never unloaded
  return *l;
}

// Whether `file` lies under `dir` (both absolute and resolved).
bool inside(const fs::path& file, const fs::path& dir) {
  const std::string& f = file.native();
  const std::string& d = dir.native();
  if (d == "/") return f.size() > 1;
  return f.size() > d.size() + 1 && f.compare(0, d.size(), d) == 0 && f[d.size()] == '/';
}

absl::Status from_error_code(const std::error_code& ec, const std::string& what) {
  std::string message = absl::StrCat(what, ": ", ec.message());
  if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
    return absl::NotFoundError(message);
  }
  if (ec == std::errc::permission_denied) return absl::PermissionDeniedError(message);
  return absl::FailedPreconditionError(message);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> load_actor_library(
    const std::string& path, const std::vector<std::string>& allowed_dirs) {
  if (path.empty()) return absl::InvalidArgumentError("actor library: empty path");

  std::vector<fs::path> allowed;
  for (const std::string& dir : allowed_dirs) {
    if (dir.empty()) continue;
    std::error_code ec;
    fs::path resolved = fs::canonical(dir, ec);
    if (!ec && fs::is_directory(resolved, ec)) allowed.push_back(std::move(resolved));
  }
  if (allowed.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "actor library ", path, ": no directory is allowed for actor libraries (given: ",
        allowed_dirs.empty() ? std::string("none") : absl::StrJoin(allowed_dirs, ", "), "); set ",
        kActorLibDirsEnv, " or the worker's --actor-lib-dir"));
  }

  // Where `path` leads: its existing part resolved, the rest (if any) as
  // written, so that a missing file is refused when outside, NotFound inside.
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return from_error_code(ec, absl::StrCat("actor library ", path));
  fs::path target = fs::weakly_canonical(absolute, ec);
  if (ec) return from_error_code(ec, absl::StrCat("actor library ", path));
  auto allows = [&](const fs::path& file) {
    return std::any_of(allowed.begin(), allowed.end(),
                       [&](const fs::path& dir) { return inside(file, dir); });
  };
  if (!allows(target)) {
    std::vector<std::string> dirs;
    for (const fs::path& dir : allowed)
      dirs.push_back(dir.native());
    return absl::PermissionDeniedError(
        absl::StrCat("actor library ", path,
                     target.native() == path ? "" : absl::StrCat(" (", target.native(), ")"),
                     " is outside the allowed directories: ", absl::StrJoin(dirs, ", ")));
  }
  fs::path resolved = fs::canonical(absolute, ec);
  if (ec) return from_error_code(ec, absl::StrCat("actor library ", path));
  if (!allows(resolved)) {  // the file changed under us
    return absl::PermissionDeniedError(absl::StrCat("actor library ", path, " (", resolved.native(),
                                                    ") is outside the allowed directories"));
  }
  if (!fs::is_regular_file(resolved, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("actor library ", resolved.native(), " is not a regular file"));
  }

  Libraries& libs = libraries();
  std::lock_guard<std::mutex> lock(libs.mu);
  auto it = libs.loaded.find(resolved.native());
  if (it != libs.loaded.end()) return it->second;

  std::vector<std::string> before = registered_actor_types();
  dlerror();  // clear any earlier error
  // RTLD_NOW: a library with unresolved symbols fails here, not mid-call.
  void* handle = dlopen(resolved.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(absl::StrCat("cannot load actor library ",
                                                      resolved.native(), ": ",
                                                      error != nullptr ? error : "dlopen failed"));
  }
  // The handle is never closed: the registry holds code from the library.
  const void* core = dlsym(handle, "troupe_core_instance");
  if (core != nullptr && core != &troupe_core_instance) {
    Dl_info theirs{};
    Dl_info ours{};
    dladdr(core, &theirs);
    dladdr(&troupe_core_instance, &ours);
    return absl::FailedPreconditionError(absl::StrCat(
        "actor library ", resolved.native(), " uses another libtroupe_core (",
        theirs.dli_fname != nullptr ? theirs.dli_fname : "unknown", ") than this process (",
        ours.dli_fname != nullptr ? ours.dli_fname : "unknown",
        "): build it against the troupe the workers run"));
  }
  std::vector<std::string> after = registered_actor_types();
  std::vector<std::string> added;
  std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                      std::back_inserter(added));
  spdlog::info("loaded actor library {}: {}", resolved.native(),
               added.empty() ? std::string("no new actor types") : absl::StrJoin(added, ", "));
  libs.loaded.emplace(resolved.native(), added);
  return added;
}

std::vector<std::string> actor_library_dirs_from_env() {
  std::vector<std::string> dirs;
  const char* value = std::getenv(kActorLibDirsEnv);
  if (value == nullptr) return dirs;
  for (absl::string_view dir : absl::StrSplit(value, ':', absl::SkipEmpty()))
    dirs.emplace_back(dir);
  return dirs;
}

}  // namespace troupe::cluster
