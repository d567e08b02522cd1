// What the `troupe data` subcommands share (data_command.cc, data_prepare.cc): exit codes,
// positional arguments set apart from flags, integer flags. Internal to trainers/.
#pragma once

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cluster/flags.h"

namespace troupe::trainers::data_cli {

inline constexpr int64_t kProgressEvery = int64_t{64} << 20;  // bytes between progress lines

// Prints the error and returns 1, the exit code of a failure.
inline int fail(const absl::Status& s) {
  std::fprintf(stderr, "troupe data: %s\n", cluster::printable(s.message()).c_str());
  return 1;
}

// Prints the message and returns 2, the exit code of a usage error.
inline int usage(const std::string& message) {
  std::fprintf(stderr, "%s\n", cluster::printable(message).c_str());
  return 2;
}

// Flags::parse takes flags only: positional arguments (files, a prefix) are set apart first. A
// flag outside `boolean` without "=" takes the next argument as its value, as Flags::parse does.
struct Arguments {
  std::vector<std::string> flags;
  std::vector<std::string> positional;
};

inline Arguments split_arguments(const std::vector<std::string>& args,
                                 const std::set<std::string>& boolean) {
  Arguments out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!arg.starts_with("-") || arg == "-") {
      out.positional.push_back(arg);
      continue;
    }
    out.flags.push_back(arg);
    const bool takes_value = arg.starts_with("--") && arg.find('=') == std::string::npos &&
                             arg != "--help" && !boolean.contains(arg.substr(2));
    if (takes_value && i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      out.flags.push_back(args[++i]);
    }
  }
  return out;
}

// The integer value of --name, in [lo, hi]; `fallback` when absent.
inline absl::StatusOr<int64_t> int_flag(const cluster::Flags& flags, const std::string& command,
                                        const std::string& name, int64_t fallback, int64_t lo,
                                        int64_t hi) {
  if (!flags.has(name)) return fallback;
  const std::string text = flags.get(name);
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < lo || value > hi) {
    return absl::InvalidArgumentError(absl::StrCat("troupe data ", command, ": --", name, " ", text,
                                                   ": expected an integer from ", lo, " to ", hi));
  }
  return value;
}

inline std::string mib(int64_t bytes) {
  return absl::StrCat(bytes >> 20, " MiB");
}

// `troupe data prepare` (data_prepare.cc).
int prepare(const std::vector<std::string>& args);

}  // namespace troupe::trainers::data_cli
