// Internal to trainers/config*.cc: reading a JSON config key by key, each
// error naming the key's full path ("optimizer.params.betas"). Not part of
// the public API (config.h keeps nlohmann-json out of its users' builds).
#pragma once

#include <cfloat>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns the status of `expr` from the enclosing function unless it is OK.
#define TROUPE_CONFIG_RETURN_IF_ERROR(expr)                           \
  do {                                                                \
    if (absl::Status status_ = (expr); !status_.ok()) return status_; \
  } while (false)

namespace troupe::trainers::config_detail {

// Keys keep the file's order, so that errors name the first problem in it.
using Json = nlohmann::ordered_json;

// Parses JSON text. InvalidArgument "line L, column C: WHAT" for malformed
// text (L and C 1-based, from the byte where parsing stopped), and
// "PATH: duplicate key" for an object that names a key twice (as DeepSpeed,
// which rejects duplicates rather than keep the last).
absl::StatusOr<Json> parse_json(absl::string_view text);

// " (did you mean 'x'?)" for the candidate nearest to `key` by edit distance
// (insertions, deletions, substitutions and swaps of neighbours), if it is at
// most 2 and below key's length; "" otherwise.
std::string did_you_mean(absl::string_view key, std::span<const std::string> candidates);

// How an error shows a value: `string "3e-3"`, `number 2.5`, `boolean true`,
// `array`, `object`, `null`.
std::string describe(const Json& value);

// Whether a present value of a key troupe does not implement asks for
// nothing: false, null, an object with "enabled": false (or "device":
// "none", for DeepSpeed's offload sections), or equal to the key's DeepSpeed
// default given as JSON text (empty: none).
bool is_inactive(const Json& value, absl::string_view default_json);

// The float as the shortest decimal that reads back to the same float, as a
// double (0.003f -> 0.003, not 0.003000000026077032), for JSON output.
double float_for_json(float value);

// One JSON object of the config, read key by key. Every key a read names
// becomes known to check_unknown(), whether present or not.
// Absent keys and keys whose value is null leave the output unchanged (null
// is DeepSpeed's "not set").
class JsonObject {
 public:
  // REQUIRES: value is an object and outlives this. path: the object's
  // path, "" for the top level.
  JsonObject(const Json& value, std::string path);

  const std::string& path() const { return path_; }
  // "path.key", or "key" at the top level.
  std::string key_path(absl::string_view key) const;
  // The value of key; null when absent or null. Marks the key known.
  const Json* find(absl::string_view key);
  bool has(absl::string_view key) { return find(key) != nullptr; }

  // Typed reads. InvalidArgument "PATH: expected T, found V" for a value of
  // another type, "PATH: N is out of range; must be ..." outside [min, max].
  // Integers may be written as numbers with an integral value (5e8).
  [[nodiscard]] absl::Status read(absl::string_view key, int* out, int64_t min,
                                  int64_t max = std::numeric_limits<int>::max());
  [[nodiscard]] absl::Status read(absl::string_view key, int64_t* out, int64_t min,
                                  int64_t max = std::numeric_limits<int64_t>::max());
  [[nodiscard]] absl::Status read(absl::string_view key, std::optional<int64_t>* out, int64_t min,
                                  int64_t max = std::numeric_limits<int64_t>::max());
  [[nodiscard]] absl::Status read(absl::string_view key, uint64_t* out);
  [[nodiscard]] absl::Status read(absl::string_view key, double* out, double min,
                                  double max = std::numeric_limits<double>::max());
  [[nodiscard]] absl::Status read(absl::string_view key, float* out, double min,
                                  double max = FLT_MAX);
  [[nodiscard]] absl::Status read(absl::string_view key, bool* out);
  [[nodiscard]] absl::Status read(absl::string_view key, std::string* out);
  // An array of positive integers (each at most INT32_MAX), in its order.
  [[nodiscard]] absl::Status read(absl::string_view key, std::vector<int64_t>* out);
  // The sub-object at key; nullopt when absent or null; InvalidArgument when
  // the value is not an object.
  [[nodiscard]] absl::StatusOr<std::optional<JsonObject>> section(absl::string_view key);

  // For a key troupe recognises but does not implement: when present and
  // not is_inactive(value, default_json), appends "PATH is not implemented by
  // troupe; ignored" to warnings.
  void warn_unimplemented(absl::string_view key, std::vector<std::string>* warnings,
                          absl::string_view default_json = "");

  // InvalidArgument "PATH.KEY: unknown key{context}{did you mean}" for the
  // first key of the object (in the file's order) that no read named.
  // context, e.g. " for optimizer type SGD", is appended as is.
  [[nodiscard]] absl::Status check_unknown(absl::string_view context = "") const;

 private:
  // type_max: the largest value of the output's type (a range up to it
  // prints as ">= min").
  absl::Status read_integer(absl::string_view key, int64_t* out, int64_t min, int64_t max,
                            int64_t type_max, bool* present);
  absl::Status read_number(absl::string_view key, double* out, double min, double max,
                           bool* present);

  const Json* value_;
  std::string path_;
  std::vector<std::string> known_;
};

// InvalidArgument with the message as given.
absl::Status config_error(std::string message);

}  // namespace troupe::trainers::config_detail
