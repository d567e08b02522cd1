// User actor libraries: shared objects holding TROUPE_ACTOR classes that a
// worker loads at run time, so that actors of those types can be spawned on
// it by name (docs/cluster.md, "User actor libraries").
//
//   std::vector<std::string> dirs = actor_library_dirs_from_env();
//   absl::StatusOr<std::vector<std::string>> types =
//       load_actor_library("/opt/job/lib/libuser_actors.so", dirs);
//   // *types == {"KeyValueShard"}; find_actor_type("KeyValueShard") finds it.
//
// A library's TROUPE_ACTOR and TROUPE_ACTOR_CONSTRUCTOR registrations run when
// it loads, into the registry of libtroupe_core, so it must be linked against
// the same libtroupe_core (the same troupe version) as the worker. A loaded
// library is never unloaded: the registry keeps pointers into it.
//
// Loading runs the library's code in this process: only directories that
// untrusted users cannot write to belong on the allow-list.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe::cluster {

// The environment variable actor_library_dirs_from_env() reads.
inline constexpr char kActorLibDirsEnv[] = "TROUPE_ACTOR_LIB_DIRS";

// Loads the actor library at `path` (relative paths are taken from the
// working directory) if it lies inside one of `allowed_dirs`: both are
// resolved first (realpath: symlinks and ".." cannot escape an allowed
// directory); allowed directories that do not exist are ignored. Returns the
// names of the actor types the library registered, sorted: those in the
// registry after it loaded that were not before. Loading the same resolved
// file again does nothing and returns the same names. Thread-safe; loads are
// serialised.
// Errors: PermissionDenied (outside every allowed directory, naming them, or
// no directory allowed), NotFound (no such file), FailedPrecondition (not a
// regular file; dlopen failed, with dlerror()'s text; or the library links
// another libtroupe_core than this process's - built against another troupe).
absl::StatusOr<std::vector<std::string>> load_actor_library(
    const std::string& path, const std::vector<std::string>& allowed_dirs);

// The allow-list from the environment: TROUPE_ACTOR_LIB_DIRS split at ':'
// (empty entries skipped); empty if it is not set.
std::vector<std::string> actor_library_dirs_from_env();

}  // namespace troupe::cluster
