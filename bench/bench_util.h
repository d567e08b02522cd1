// Shared helpers for benchmarks: flags, medians, a side-by-side table, JSON.
#pragma once

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace troupe::bench {

// The cores this process may run on.
inline int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof(set), &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
}

// The 1-minute load average, or -1.
inline double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  in >> load;
  return load;
}

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One row: a case measured for troupe and for its peer (same unit, higher is better).
struct Row {
  std::string name;
  std::string unit;
  double troupe = 0;
  double peer = 0;  // 0 when the peer was not run
  double ratio() const { return peer > 0 ? troupe / peer : 0; }
};

inline void print_table(const std::string& peer_name, const std::vector<Row>& rows) {
  std::printf("%-34s %16s %16s %8s\n", "case", "troupe", peer_name.c_str(), "ratio");
  for (const Row& r : rows) {
    if (r.peer > 0) {
      std::printf("%-34s %16.4g %16.4g %7.2fx   (%s, median)\n", r.name.c_str(), r.troupe, r.peer,
                  r.ratio(), r.unit.c_str());
    } else {
      std::printf("%-34s %16.4g %16s %8s   (%s, median)\n", r.name.c_str(), r.troupe, "-", "-",
                  r.unit.c_str());
    }
  }
}

inline bool write_json(const std::string& path, const std::string& bench, const std::string& peer,
                       const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) return false;
  out << "{\n  \"benchmark\": \"" << bench << "\",\n  \"peer\": \"" << peer
      << "\",\n  \"cases\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << "    {\"name\": \"" << r.name << "\", \"unit\": \"" << r.unit
        << "\", \"troupe\": " << r.troupe << ", \"peer\": " << r.peer
        << ", \"ratio\": " << r.ratio() << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  out << "  ]\n}\n";
  return static_cast<bool>(out);
}

// Minimal flag parsing: --name value.
// "a,b,c" as its items (empty ones skipped), and as integers.
inline std::vector<std::string> parse_name_list(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline std::vector<int> parse_int_list(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : parse_name_list(s))
    out.push_back(std::atoi(item.c_str()));
  return out;
}

class Flags {
 public:
  Flags(int argc, char** argv) : argc_(argc), argv_(argv) {}
  std::string get(const char* name, const std::string& fallback) const {
    for (int i = 1; i + 1 < argc_; ++i) {
      if (std::strcmp(argv_[i], name) == 0) return argv_[i + 1];
    }
    return fallback;
  }
  long get_long(const char* name, long fallback) const {
    std::string v = get(name, "");
    return v.empty() ? fallback : std::strtol(v.c_str(), nullptr, 10);
  }
  bool has(const char* name) const {
    for (int i = 1; i < argc_; ++i) {
      if (std::strcmp(argv_[i], name) == 0) return true;
    }
    return false;
  }

 private:
  int argc_;
  char** argv_;
};

// ---- Running a peer written in Python ---------------------------------------

// `s` quoted for /bin/sh.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out + "'";
}

// The first interpreter that runs `probe` (python code, e.g. "import torch") with exit status 0:
// $TROUPE_TORCH_PYTHON, the virtual environment bench/setup_torch_peers.sh makes (/tmp/torchenv),
// python3, /usr/bin/python3. Each is probed with a bounded run.
inline std::optional<std::string> find_python(const std::string& probe) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_TORCH_PYTHON"); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  }
  if (::access("/tmp/torchenv/bin/python", X_OK) == 0) {
    candidates.push_back("/tmp/torchenv/bin/python");
  }
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");
  for (const std::string& python : candidates) {
    std::string cmd =
        "timeout 120 " + shell_quote(python) + " -c " + shell_quote(probe) + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0) return python;
  }
  return std::nullopt;
}

// The first interpreter that can import torch, for the benches' PyTorch peers (find_python).
inline std::optional<std::string> find_torch_python() {
  return find_python("import torch");
}

// The value of "key": NUMBER in a flat JSON object (a peer's one-line
// report), if present.
inline std::optional<double> json_number(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return std::nullopt;
  at = json.find(':', at);
  if (at == std::string::npos) return std::nullopt;
  const char* begin = json.c_str() + at + 1;
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return v;
}

// The value of "key": "STRING" in a flat JSON object (escapes kept as they
// are), or "".
inline std::string json_string(const std::string& json, const std::string& key) {
  size_t at = json.find("\"" + key + "\"");
  if (at == std::string::npos) return "";
  size_t q1 = json.find('"', json.find(':', at));
  if (q1 == std::string::npos) return "";
  size_t q2 = q1 + 1;
  while (q2 < json.size() && json[q2] != '"')
    q2 += json[q2] == '\\' ? 2 : 1;
  return q2 >= json.size() ? "" : json.substr(q1 + 1, q2 - q1 - 1);
}

// `s` with quotes and backslashes escaped, for a JSON string.
inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out;
}

// Everything `pipe` gives until its end (a peer's output, from popen).
inline std::string read_all(std::FILE* pipe) {
  std::string out;
  char chunk[4096];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0)
    out.append(chunk, got);
  return out;
}

}  // namespace troupe::bench
