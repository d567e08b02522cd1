// Where the tokenizer tests find their files: the vocabularies and corpus that
// scripts/fetch_text.sh fetches ($TROUPE_DATA, else data/ in the source tree), and the committed
// reference ids of tiktoken and the sentencepiece package (tests/data/tokenizer/).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "text/digest.h"

namespace troupe::text::testing {

inline std::string data_dir() {
  const char* env = std::getenv("TROUPE_DATA");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(TROUPE_SOURCE_DIR "/data");
}

inline std::string fixture_dir() {
  return TROUPE_SOURCE_DIR "/tests/data/tokenizer";
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// One line of a reference file: name, bytes, tokens, sha256 of the ids as int32 little-endian.
struct Reference {
  int64_t bytes = 0;
  int64_t tokens = 0;
  std::string sha256;
};

inline std::map<std::string, Reference> read_references(const std::string& file) {
  std::map<std::string, Reference> refs;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    Reference r;
    if (fields >> name >> r.bytes >> r.tokens >> r.sha256) refs[name] = r;
  }
  return refs;
}

inline std::vector<int32_t> read_ids(const std::string& file) {
  std::ifstream in(file);
  std::vector<int32_t> ids;
  std::string token;
  while (in >> token) {
    if (token[0] == '#') {
      std::getline(in, token);
      continue;
    }
    ids.push_back(static_cast<int32_t>(std::stol(token)));
  }
  return ids;
}

inline std::string ids_sha256(const std::vector<int32_t>& ids) {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    const auto u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k)
      bytes.push_back(static_cast<char>((u >> (8 * k)) & 0xFF));
  }
  return sha256_hex(bytes);
}

// The first position where two id lists differ, or -1.
inline int64_t first_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace troupe::text::testing
