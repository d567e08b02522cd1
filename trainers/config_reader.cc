#include "trainers/config_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace troupe::trainers::config_detail {
namespace {

// nlohmann's what() is "[json.exception.KIND.ID] DETAIL"; parse errors put
// "parse error at line L, column C: " before the detail. Returns the detail.
absl::string_view exception_detail(absl::string_view what) {
  if (size_t close = what.find("] "); close != absl::string_view::npos)
    what.remove_prefix(close + 2);
  if (absl::StartsWith(what, "parse error")) {
    if (size_t colon = what.find(": "); colon != absl::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
  }
  return what;
}

// Edit distance with adjacent transpositions (optimal string alignment).
size_t edit_distance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i)
    d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j)
    d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "must be >= min" when the range is open above and the value is below it.
std::string range_text(bool above_max, int64_t min, int64_t max, int64_t type_max) {
  if (!above_max && max == type_max) return absl::StrCat("must be >= ", min);
  return absl::StrCat("must be in [", min, ", ", max, "]");
}

// Hugging Face's Trainer fills "auto" values in before DeepSpeed sees them.
std::string auto_hint(const Json& value) {
  if (value.is_string() && value.get<std::string>() == "auto") {
    return " ('auto' is a Hugging Face Trainer placeholder; troupe needs the value itself)";
  }
  return "";
}

}  // namespace

absl::Status config_error(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::StatusOr<Json> parse_json(absl::string_view text) {
  // The parser reports each object's keys as it reads them; a stack of the
  // open objects' keys finds a repeated one.
  struct Open {
    bool object = false;
    std::set<std::string> keys;
    std::string key;  // the object's current key
  };
  std::vector<Open> open;
  std::string duplicate;  // the first repeated key's path
  Json::parser_callback_t callback = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open.push_back({.object = true, .keys = {}, .key = {}});
        break;
      case Json::parse_event_t::array_start:
        open.push_back({.object = false, .keys = {}, .key = {}});
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        if (!open.empty()) open.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (open.empty()) break;
        Open& top = open.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second && duplicate.empty()) {
          for (const Open& o : open) {
            if (!o.object) continue;
            if (!duplicate.empty()) duplicate += '.';
            duplicate += o.key;
          }
        }
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  };
  Json value;
  try {
    value = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::parse_error& e) {
    // e.byte: characters read, the one that stopped the parser included.
    const size_t end = std::min<size_t>(e.byte, text.size());
    const absl::string_view read = text.substr(0, end);
    const size_t line = 1 + static_cast<size_t>(std::count(read.begin(), read.end(), '\n'));
    const size_t last_newline = read.rfind('\n');
    const size_t column = last_newline == absl::string_view::npos ? end : end - last_newline - 1;
    return config_error(absl::StrCat("line ", line, ", column ", column,
                                     ": invalid JSON: ", exception_detail(e.what())));
  } catch (const Json::exception& e) {
    return config_error(absl::StrCat("invalid JSON: ", exception_detail(e.what())));
  }
  if (!duplicate.empty()) {
    return config_error(absl::StrCat(duplicate, ": duplicate key (keep one)"));
  }
  return value;
}

std::string did_you_mean(absl::string_view key, std::span<const std::string> candidates) {
  const std::string* best = nullptr;
  size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(key, c);
    if (d < best_distance && d < key.size()) {
      best = &c;
      best_distance = d;
    }
  }
  return best ? absl::StrCat(" (did you mean '", *best, "'?)") : "";
}

std::string describe(const Json& value) {
  switch (value.type()) {
    case Json::value_t::string: {
      std::string s = value.dump();
      if (s.size() > 42) s = s.substr(0, 38) + "...\"";
      return absl::StrCat("string ", s);
    }
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return absl::StrCat("number ", value.dump());
    case Json::value_t::boolean:
      return absl::StrCat("boolean ", value.dump());
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "null";
  }
}

bool is_inactive(const Json& value, absl::string_view default_json) {
  if (value.is_null() || (value.is_boolean() && !value.get<bool>())) return true;
  if (value.is_object()) {
    if (auto it = value.find("enabled"); it != value.end() && *it == false) return true;
    if (auto it = value.find("device"); it != value.end() && *it == "none") return true;
  }
  if (!default_json.empty()) return value == Json::parse(std::string(default_json));
  return false;
}

double float_for_json(float value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof(text) - 1, value);
  if (error != std::errc()) return value;
  *end = '\0';
  return std::strtod(text, nullptr);
}

JsonObject::JsonObject(const Json& value, std::string path)
    : value_(&value), path_(std::move(path)) {}

std::string JsonObject::key_path(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

const Json* JsonObject::find(absl::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  auto it = value_->find(std::string(key));
  if (it == value_->end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status JsonObject::read_integer(absl::string_view key, int64_t* out, int64_t min, int64_t max,
                                      int64_t type_max, bool* present) {
  *present = false;
  const Json* v = find(key);
  if (v == nullptr) return absl::OkStatus();
  bool in_int64 = true;
  int64_t n = 0;
  if (v->is_number_integer() && !v->is_number_unsigned()) {
    n = v->get<int64_t>();
  } else if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    in_int64 = u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    n = in_int64 ? static_cast<int64_t>(u) : 0;
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) {
      return config_error(
          absl::StrCat(key_path(key), ": expected an integer, found ", describe(*v)));
    }
    in_int64 = d >= -0x1p63 && d < 0x1p63;
    n = in_int64 ? static_cast<int64_t>(d) : 0;
  } else {
    return config_error(
        absl::StrCat(key_path(key), ": expected an integer, found ", describe(*v), auto_hint(*v)));
  }
  if (!in_int64 || n < min || n > max) {
    const bool above_max = !in_int64 || n > max;
    return config_error(absl::StrCat(key_path(key), ": ", v->dump(), " is out of range; ",
                                     range_text(above_max, min, max, type_max)));
  }
  *out = n;
  *present = true;
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, int* out, int64_t min, int64_t max) {
  int64_t n = 0;
  bool present = false;
  TROUPE_CONFIG_RETURN_IF_ERROR(
      read_integer(key, &n, min, max, std::numeric_limits<int>::max(), &present));
  if (present) *out = static_cast<int>(n);
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, int64_t* out, int64_t min, int64_t max) {
  int64_t n = 0;
  bool present = false;
  TROUPE_CONFIG_RETURN_IF_ERROR(
      read_integer(key, &n, min, max, std::numeric_limits<int64_t>::max(), &present));
  if (present) *out = n;
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, std::optional<int64_t>* out, int64_t min,
                              int64_t max) {
  int64_t n = 0;
  bool present = false;
  TROUPE_CONFIG_RETURN_IF_ERROR(
      read_integer(key, &n, min, max, std::numeric_limits<int64_t>::max(), &present));
  if (present) *out = n;
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, uint64_t* out) {
  const Json* v = find(key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_number_unsigned()) {
    *out = v->get<uint64_t>();
    return absl::OkStatus();
  }
  if (v->is_number_integer() || v->is_number_float()) {
    const double d = v->get<double>();
    if (v->is_number_float() && (!std::isfinite(d) || std::floor(d) != d)) {
      return config_error(
          absl::StrCat(key_path(key), ": expected an integer, found ", describe(*v)));
    }
    if (d < 0 || d >= 0x1p64) {
      return config_error(
          absl::StrCat(key_path(key), ": ", v->dump(), " is out of range; must be in [0, 2^64)"));
    }
    *out = v->is_number_integer() ? static_cast<uint64_t>(v->get<int64_t>())
                                  : static_cast<uint64_t>(d);
    return absl::OkStatus();
  }
  return config_error(
      absl::StrCat(key_path(key), ": expected an integer, found ", describe(*v), auto_hint(*v)));
}

absl::Status JsonObject::read_number(absl::string_view key, double* out, double min, double max,
                                     bool* present) {
  *present = false;
  const Json* v = find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) {
    return config_error(
        absl::StrCat(key_path(key), ": expected a number, found ", describe(*v), auto_hint(*v)));
  }
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < min || d > max) {
    const bool open_above = max == std::numeric_limits<double>::max() || max == FLT_MAX;
    const std::string bound = open_above && d <= max
                                  ? absl::StrCat("must be >= ", min)
                                  : absl::StrCat("must be in [", min, ", ", max, "]");
    return config_error(absl::StrCat(key_path(key), ": ", v->dump(), " is out of range; ", bound));
  }
  *out = d;
  *present = true;
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, double* out, double min, double max) {
  double d = 0;
  bool present = false;
  TROUPE_CONFIG_RETURN_IF_ERROR(read_number(key, &d, min, max, &present));
  if (present) *out = d;
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, float* out, double min, double max) {
  double d = 0;
  bool present = false;
  TROUPE_CONFIG_RETURN_IF_ERROR(
      read_number(key, &d, min, std::min<double>(max, FLT_MAX), &present));
  if (present) *out = static_cast<float>(d);
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, bool* out) {
  const Json* v = find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) {
    return config_error(absl::StrCat(key_path(key), ": expected true or false, found ",
                                     describe(*v), auto_hint(*v)));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, std::string* out) {
  const Json* v = find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) {
    return config_error(absl::StrCat(key_path(key), ": expected a string, found ", describe(*v)));
  }
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status JsonObject::read(absl::string_view key, std::vector<int64_t>* out) {
  const Json* values = find(key);
  if (values == nullptr) return absl::OkStatus();
  const std::string path = key_path(key);
  if (!values->is_array()) {
    return config_error(
        absl::StrCat(path, ": expected an array of positive integers, found ", describe(*values)));
  }
  for (const Json& v : *values) {
    // In range before it is converted: a double beyond int64 has no conversion.
    const double x = v.is_number() ? v.get<double>() : 0;
    if (x < 1 || x > INT32_MAX || x != std::floor(x)) {
      return config_error(absl::StrCat(path, ": expected positive integers, found ", describe(v)));
    }
    out->push_back(static_cast<int64_t>(x));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<JsonObject>> JsonObject::section(absl::string_view key) {
  const Json* v = find(key);
  if (v == nullptr) return std::optional<JsonObject>();
  if (!v->is_object()) {
    return config_error(
        absl::StrCat(key_path(key), ": expected an object, found ", describe(*v), auto_hint(*v)));
  }
  return std::optional<JsonObject>(JsonObject(*v, key_path(key)));
}

void JsonObject::warn_unimplemented(absl::string_view key, std::vector<std::string>* warnings,
                                    absl::string_view default_json) {
  const Json* v = find(key);
  if (v == nullptr || is_inactive(*v, default_json)) return;
  warnings->push_back(absl::StrCat(key_path(key), " is not implemented by troupe; ignored"));
}

absl::Status JsonObject::check_unknown(absl::string_view context) const {
  for (const auto& [key, unused] : value_->items()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    return config_error(
        absl::StrCat(key_path(key), ": unknown key", context, did_you_mean(key, known_)));
  }
  return absl::OkStatus();
}

}  // namespace troupe::trainers::config_detail
