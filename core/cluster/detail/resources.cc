#include "core/cluster/detail/resources.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace troupe::cluster {
namespace {

absl::string_view to_absl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}
std::string_view to_std(absl::string_view s) {
  return std::string_view(s.data(), s.size());
}

struct ByteSuffix {
  char letter;
  double bytes;
};
// Largest first: to_string() picks the first that divides the amount.
constexpr ByteSuffix kByteSuffixes[] = {
    {'T', 1099511627776.0}, {'G', 1073741824.0}, {'M', 1048576.0}, {'K', 1024.0}};

bool is_blank(char c) {
  return absl::ascii_isspace(static_cast<unsigned char>(c));
}

absl::Status bad_item(std::string_view text, std::string_view item, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("bad resource item '", to_absl(item), "' in \"",
                                                 to_absl(text), "\": ", to_absl(why)));
}

// Multiplier for a memory suffix ("" -> 1); 0 when the suffix is unknown.
double byte_multiplier(std::string_view suffix) {
  if (suffix.empty()) return 1;
  if (suffix.size() != 1) return 0;
  char letter = absl::ascii_toupper(static_cast<unsigned char>(suffix[0]));
  for (const ByteSuffix& s : kByteSuffixes) {
    if (s.letter == letter) return s.bytes;
  }
  return 0;
}

// Parses the amount of one item: a non-negative fixed-point decimal, then a
// suffix for memory. `text` and `item` are for error messages.
absl::StatusOr<double> parse_amount(std::string_view name, std::string_view value,
                                    std::string_view text, std::string_view item) {
  if (value.empty()) return bad_item(text, item, "missing amount after '='");
  if (value.front() == '-') return bad_item(text, item, "amount is negative");
  double amount = 0;
  const char* end = value.data() + value.size();
  auto [rest, ec] = std::from_chars(value.data(), end, amount, std::chars_format::fixed);
  if (ec != std::errc() || rest == value.data()) {
    return bad_item(text, item, "amount is not a decimal number like 2 or 0.5");
  }
  if (!std::isfinite(amount)) return bad_item(text, item, "amount is not a finite number");
  std::string_view suffix(rest, static_cast<size_t>(end - rest));
  if (name != kMemory) {
    if (suffix.empty()) return amount;
    return bad_item(text, item,
                    absl::StrCat("unexpected '", to_absl(suffix),
                                 "' after the amount (only memory takes a K/M/G/T suffix)"));
  }
  double multiplier = byte_multiplier(suffix);
  if (multiplier == 0) {
    return bad_item(text, item,
                    absl::StrCat("unknown suffix '", to_absl(suffix),
                                 "' (memory takes K, M, G or T, powers of 1024)"));
  }
  double bytes = amount * multiplier;
  if (std::floor(bytes) != bytes)
    return bad_item(text, item, "memory is not a whole number of bytes");
  return bytes;
}

// The shortest fixed-point decimal that parses back to `v`.
std::string format_decimal(double v) {
  if (v == 0) v = 0;  // no "-0"
  char buf[512];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  if (ec != std::errc()) return absl::StrCat(v);
  return std::string(buf, end);
}

std::string format_amount(std::string_view name, double v) {
  if (name != kMemory || v <= 0 || std::floor(v) != v) return format_decimal(v);
  for (const ByteSuffix& s : kByteSuffixes) {
    if (v >= s.bytes && std::fmod(v, s.bytes) == 0) {
      return absl::StrCat(format_decimal(v / s.bytes), std::string(1, s.letter));
    }
  }
  return format_decimal(v);
}

double snap_to_zero(double v) {
  return std::abs(v) <= Resources::kEpsilon ? 0.0 : v;
}

}  // namespace

absl::StatusOr<Resources> Resources::parse(std::string_view text) {
  Resources result;
  absl::string_view all = absl::StripAsciiWhitespace(to_absl(text));
  if (all.empty()) return result;
  for (absl::string_view raw : absl::StrSplit(all, ',')) {
    std::string_view item = to_std(absl::StripAsciiWhitespace(raw));
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) return bad_item(text, item, "expected name=amount");
    std::string_view name = to_std(absl::StripAsciiWhitespace(to_absl(item.substr(0, eq))));
    std::string_view value = to_std(absl::StripAsciiWhitespace(to_absl(item.substr(eq + 1))));
    if (name.empty()) return bad_item(text, item, "empty resource name");
    if (std::any_of(name.begin(), name.end(), is_blank)) {
      return bad_item(text, item, "resource name contains a blank");
    }
    if (result.find(name) != nullptr) {
      return bad_item(text, item, absl::StrCat("'", to_absl(name), "' is given twice"));
    }
    absl::StatusOr<double> amount = parse_amount(name, value, text, item);
    if (!amount.ok()) return amount.status();
    result.at(name) = *amount;
  }
  return result;
}

const double* Resources::find(std::string_view name) const {
  for (const auto& [n, amount] : amounts_) {
    if (n == name) return &amount;
  }
  return nullptr;
}

double& Resources::at(std::string_view name) {
  auto it = std::lower_bound(amounts_.begin(), amounts_.end(), name,
                             [](const auto& entry, std::string_view n) { return entry.first < n; });
  if (it == amounts_.end() || it->first != name) it = amounts_.emplace(it, std::string(name), 0.0);
  return it->second;
}

double Resources::get(std::string_view name) const {
  const double* amount = find(name);
  return amount == nullptr ? 0.0 : *amount;
}

void Resources::set(std::string_view name, double amount) {
  at(name) = amount;
}

bool Resources::contains(const Resources& request) const {
  return std::all_of(request.amounts_.begin(), request.amounts_.end(), [&](const auto& entry) {
    return entry.second <= get(entry.first) + kEpsilon;
  });
}

Resources& Resources::operator+=(const Resources& other) {
  for (const auto& [name, amount] : other.amounts_) {
    double& mine = at(name);
    mine = snap_to_zero(mine + amount);
  }
  return *this;
}

Resources& Resources::operator-=(const Resources& other) {
  for (const auto& [name, amount] : other.amounts_) {
    double& mine = at(name);
    mine = snap_to_zero(mine - amount);
  }
  return *this;
}

bool Resources::empty() const {
  return std::all_of(amounts_.begin(), amounts_.end(),
                     [](const auto& entry) { return std::abs(entry.second) <= kEpsilon; });
}

bool Resources::any_negative() const {
  return std::any_of(amounts_.begin(), amounts_.end(),
                     [](const auto& entry) { return entry.second < -kEpsilon; });
}

std::string Resources::to_string() const {
  return absl::StrJoin(amounts_, ",", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first, "=", format_amount(entry.first, entry.second));
  });
}

bool operator==(const Resources& a, const Resources& b) {
  auto same_in = [](const Resources& x, const Resources& y) {
    return std::all_of(x.amounts_.begin(), x.amounts_.end(), [&](const auto& entry) {
      return std::abs(entry.second - y.get(entry.first)) <= Resources::kEpsilon;
    });
  };
  return same_in(a, b) && same_in(b, a);
}

Resources operator+(Resources a, const Resources& b) {
  return a += b;
}
Resources operator-(Resources a, const Resources& b) {
  return a -= b;
}

}  // namespace troupe::cluster
