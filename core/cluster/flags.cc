#include "core/cluster/flags.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troupe::cluster {

std::string printable(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Flags> Flags::parse(const std::string& command, const std::vector<std::string>& args,
                                   const std::set<std::string>& known,
                                   const std::set<std::string>& boolean) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      flags.help_ = true;
      continue;
    }
    if (!arg.starts_with("--")) {
      return absl::InvalidArgumentError(absl::StrCat("troupe ", command, ": unexpected argument '",
                                                     arg, "' (flags look like --name value)"));
    }
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (!known.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat("troupe ", command, ": unknown flag --", name,
                                                     " (see troupe ", command, " --help)"));
    }
    if (boolean.contains(name)) {
      flags.values_[name].push_back(value.value_or("true"));
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size() || args[i + 1].starts_with("--")) {
        return absl::InvalidArgumentError(
            absl::StrCat("troupe ", command, ": --", name, " needs a value"));
      }
      value = args[++i];
    }
    flags.values_[name].push_back(*value);
  }
  return flags;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> Flags::all(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

}  // namespace troupe::cluster
