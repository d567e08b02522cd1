// How a benchmark that cannot go on ends: "NAME: what" on stderr (NAME the
// executable's, as the benchmarks name themselves), exit status 1.
#pragma once

#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace troupe::bench {

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

template <class T>
T value_or_die(absl::StatusOr<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().ToString());
  return *std::move(r);
}

}  // namespace troupe::bench
