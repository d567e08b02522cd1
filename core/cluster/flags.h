// Command-line flags for the cluster commands: "--name value" or
// "--name=value", repeatable where a command allows it, "--help" anywhere.
// Unknown flags and missing values are usage errors that name the flag.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace troupe::cluster {

// `text` as a terminal should show it: control characters other than newline
// and tab as \xNN. What commands print of messages quoting a user's input
// goes through it (a NUL in a key would otherwise end the message there).
std::string printable(absl::string_view text);

class Flags {
 public:
  // Parses `args` for `command`, accepting only the flags in `known` (those in
  // `boolean` take no value).
  static absl::StatusOr<Flags> parse(const std::string& command,
                                     const std::vector<std::string>& args,
                                     const std::set<std::string>& known,
                                     const std::set<std::string>& boolean = {});

  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.contains(name); }
  // The last value given for `name`, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback = "") const;
  // Every value given for a repeatable flag, in order.
  std::vector<std::string> all(const std::string& name) const;

 private:
  bool help_ = false;
  std::map<std::string, std::vector<std::string>> values_;
};

}  // namespace troupe::cluster
