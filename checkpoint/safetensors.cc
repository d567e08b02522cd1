#include "checkpoint/safetensors.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "nn/dtype.h"

namespace troupe::checkpoint {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100 << 20;  // safetensors' own limit

// The product of `shape`; -1 for a negative dimension or a product beyond 2^62.
int64_t elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > (int64_t{1} << 62) / d)) return -1;
    n *= d;
  }
  return n;
}

}  // namespace

absl::Status write_safetensors(io::Env* env, const std::string& path,
                               const std::vector<SafeTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const SafeTensor& t : tensors) {
    if (!names.insert(t.name).second || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", t.name, " twice"));
    }
    if (elements(t.shape) != static_cast<int64_t>(t.data.size())) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor ", t.name, " has ",
                                                     t.data.size(), " values for its shape"));
    }
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return io::write_file_atomically(env, path, [&](io::WritableFile& f) -> absl::Status {
    uint8_t length[8];
    const uint64_t n = text.size();
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<uint8_t>(n >> (8 * i));
    if (absl::Status s = f.append(length, 8); !s.ok()) return s;
    if (absl::Status s = f.append(text.data(), text.size()); !s.ok()) return s;
    for (const SafeTensor& t : tensors) {
      if (absl::Status s = f.append(t.data.data(), t.data.size() * sizeof(float)); !s.ok())
        return s;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<SafeTensor>> read_safetensors(
    io::Env* env, const std::string& path, std::map<std::string, std::string>* metadata) {
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  absl::StatusOr<std::unique_ptr<io::RandomAccessFile>> f = env->new_random_access_file(path);
  if (!f.ok()) return f.status();
  uint8_t length[8];
  if (absl::Status s = (*f)->read(0, 8, length); !s.ok()) return s;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (n > kMaxHeaderBytes || 8 + n > (*f)->size()) return bad("not a safetensors file");
  std::string text(n, '\0');
  if (absl::Status s = (*f)->read(8, n, text.data()); !s.ok()) return s;
  std::vector<SafeTensor> out;
  try {
    const json header = json::parse(text);
    const uint64_t data_size = (*f)->size() - 8 - n;
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") {
        if (metadata != nullptr) *metadata = v.get<std::map<std::string, std::string>>();
        continue;
      }
      const std::string dtype = v.at("dtype").get<std::string>();
      nn::DType type = nn::DType::kFloat32;
      if (dtype == "F16") {
        type = nn::DType::kFloat16;
      } else if (dtype == "BF16") {
        type = nn::DType::kBFloat16;
      } else if (dtype != "F32") {
        // Integer buffers (a causal mask, say) are not weights: skipped.
        if (dtype[0] == 'I' || dtype[0] == 'U' || dtype == "BOOL") continue;
        return bad(absl::StrCat(name, ": dtype ", dtype, " is not F32, F16 or BF16"));
      }
      const size_t width = type == nn::DType::kFloat32 ? 4 : 2;
      SafeTensor t{.name = name, .shape = v.at("shape").get<std::vector<int64_t>>(), .data = {}};
      const auto offsets = v.at("data_offsets").get<std::vector<uint64_t>>();
      const int64_t count = elements(t.shape);
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size || count < 0 ||
          offsets[1] - offsets[0] != static_cast<uint64_t>(count) * width) {
        return bad(absl::StrCat(name, ": data_offsets do not fit"));
      }
      t.data.resize(static_cast<size_t>(count));
      if (type == nn::DType::kFloat32) {
        if (absl::Status s = (*f)->read(8 + n + offsets[0], offsets[1] - offsets[0], t.data.data());
            !s.ok()) {
          return s;
        }
      } else {
        std::vector<uint16_t> half(static_cast<size_t>(count));
        if (absl::Status s = (*f)->read(8 + n + offsets[0], offsets[1] - offsets[0], half.data());
            !s.ok()) {
          return s;
        }
        nn::convert(half.data(), type, t.data.data(), nn::DType::kFloat32, count);
      }
      out.push_back(std::move(t));
    }
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  return out;
}

}  // namespace troupe::checkpoint
