// The head's state directory: where it keeps the cluster token, its address
// and the ids it has handed out, and where workers, drivers and the CLI on
// the same machine find them. docs/security.md has the threat model.
//
// The directory must be the user's own: a directory (not a symbolic link)
// owned by this user and writable by nobody else, or anyone who can write
// there could plant a symbolic link the head would write the token through,
// or replace the token. Files in it are private files of the file Env
// (core/io/env.h: created exclusively, never through a symbolic link, mode
// 0600) and replaced by its atomic write, never written in place.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace troupe::cluster {

// Creates `dir` (and missing parents, mode 0700) if it does not exist, then
// checks it as above. Errors: InvalidArgument (empty path), PermissionDenied
// (cannot create it; not a directory, a symbolic link, another user's, or
// group/world-writable - each named with the fix).
absl::Status prepare_state_dir(const std::string& dir);

// The cluster token in `dir`: the one there (a head restarted on the same
// directory keeps its token, so its workers can rejoin it), else a fresh one,
// created. `*fresh` says which. Errors: PermissionDenied (a symbolic link,
// not a regular file, another user's, readable by others; or the directory
// refuses the new file), InvalidArgument (not a token), AlreadyExists
// (another process created it meanwhile), the Env's errors (a write failed).
absl::StatusOr<std::string> load_or_create_token(const std::string& dir, bool* fresh);

// Replaces file `name` in `dir` with `contents` (io::write_file_atomically
// of a private file: NAME.PID.tmp, written, synced and renamed over the old
// one, and the directory synced: a reader sees the old or the new, whole).
// The Env's errors, prefixed "cannot replace DIR/NAME".
absl::Status write_state_file(const std::string& dir, const std::string& name,
                              const std::string& contents);
// Reads file `name` in `dir`; NotFound if absent. At most 64 KiB.
absl::StatusOr<std::string> read_state_file(const std::string& dir, const std::string& name);
// Removes file `name` in `dir` if present.
void remove_state_file(const std::string& dir, const std::string& name);

}  // namespace troupe::cluster
