// Resources: a bag of named amounts that a node offers or an actor or bundle
// asks for. The well-known names are "CPU", "GPU", "memory" (bytes) and
// "RDMA" (the node's active RDMA NIC ports: the scheduler spreads groups over
// nodes that have them first); any other name is a custom label, as in Ray
// ("TPU", "node:10.0.0.1", ...).
//
// Text form, as parse() takes it and to_string() writes it:
//   "CPU=2,GPU=0.5,memory=8G,tpu_v4=1"
// Amounts are non-negative decimals (no exponent). memory alone takes a K, M,
// G or T suffix, in powers of 1024, and must come to whole bytes.
//
// An absent name counts as zero, everywhere: get() returns 0, contains()
// treats it as 0, and operator== compares {CPU=1} and {CPU=1,GPU=0} equal.
// Comparisons tolerate kEpsilon so that amounts added and subtracted in
// fractions (0.1 + 0.2 - 0.3) still balance.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe::cluster {

inline constexpr std::string_view kCpu = "CPU";
inline constexpr std::string_view kGpu = "GPU";
inline constexpr std::string_view kMemory = "memory";
inline constexpr std::string_view kRdma = "RDMA";

class Resources {
 public:
  // Slack allowed when comparing amounts.
  static constexpr double kEpsilon = 1e-9;

  Resources() = default;

  // Parses the text form above; an empty (or all-blank) string gives empty
  // resources. Blanks around items, names and amounts are ignored.
  // Errors: InvalidArgument naming the bad item: no '=', an empty name, a name
  // given twice, a missing, negative, non-finite or malformed amount, a suffix
  // on anything but memory, an unknown suffix, or a fraction of a byte.
  [[nodiscard]] static absl::StatusOr<Resources> parse(std::string_view text);

  // The amount of `name`; 0 if absent.
  double get(std::string_view name) const;
  // Sets `name` to `amount`, keeping the entry even when the amount is 0 (so
  // that "GPU=0" survives a round trip). REQUIRES: `name` is non-empty and has
  // no ',', '=' or blanks, or to_string() will not parse back.
  void set(std::string_view name, double amount);

  // True when every amount in `request` is at most ours (+ kEpsilon).
  bool contains(const Resources& request) const;

  // Adds or subtracts amount by amount. Results within kEpsilon of zero become
  // exactly zero; a subtraction may leave an amount negative.
  Resources& operator+=(const Resources& other);
  Resources& operator-=(const Resources& other);

  // True when every amount is zero (or there are none).
  bool empty() const;
  // True when some amount is below zero (by more than kEpsilon).
  bool any_negative() const;

  // Every entry, zeros included, sorted by name.
  using Amounts = std::vector<std::pair<std::string, double>>;
  const Amounts& amounts() const { return amounts_; }

  // "CPU=2,GPU=0,memory=8G": sorted by name, memory with the largest suffix
  // that divides it, other amounts in the shortest decimal that parses back
  // to the same double. Empty resources give "". Round-trips through parse().
  std::string to_string() const;

  // Equal when every name has the same amount within kEpsilon, absent = 0.
  friend bool operator==(const Resources& a, const Resources& b);

 private:
  // The amount named `name`, added as 0 if absent.
  double& at(std::string_view name);
  const double* find(std::string_view name) const;

  // Sorted by name, and short (a few names): a flat vector copies in one
  // allocation and looks up without building a string - the scheduler copies
  // and compares one per node for every placement.
  Amounts amounts_;
};

Resources operator+(Resources a, const Resources& b);
Resources operator-(Resources a, const Resources& b);

}  // namespace troupe::cluster
