#include "actors/data/token_dataset_header.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace troupe::actors {
namespace {

// Far more than any disk holds, and small enough that num_tokens x 4 bytes
// cannot overflow.
constexpr int64_t kMaxTokens = int64_t{1} << 60;

absl::Status bad(const std::string& file, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", what));
}

}  // namespace

TokenDtype dtype_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenDtype::kUint16 : TokenDtype::kUint32;
}

const char* dtype_name(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? "uint16" : "uint32";
}

int dtype_bytes(TokenDtype dtype) {
  return dtype == TokenDtype::kUint16 ? 2 : 4;
}

std::string header_to_json(const TokenDatasetHeader& header) {
  // nlohmann::ordered_json keeps the keys in the documented order.
  nlohmann::ordered_json j;
  j["format"] = kTokenFormat;
  j["version"] = kTokenFormatVersion;
  j["dtype"] = dtype_name(header.dtype);
  j["vocab_size"] = header.vocab_size;
  j["num_tokens"] = header.num_tokens;
  j["tokenizer"] = header.tokenizer;
  j["source"] = header.source;
  if (header.text_bytes > 0) j["text_bytes"] = header.text_bytes;
  return j.dump() + "\n";
}

absl::StatusOr<TokenDatasetHeader> parse_header(absl::string_view json_text,
                                                const std::string& file) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad(file, "not valid JSON (truncated or not a dataset header?)");
  if (!j.is_object()) return bad(file, "expected a JSON object");
  auto integer = [&](const char* key, int64_t* out) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end()) return bad(file, absl::StrCat("missing key \"", key, "\""));
    if (!it->is_number_integer()) {
      return bad(file, absl::StrCat("\"", key, "\" must be an integer, not ", it->dump()));
    }
    if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX}) {
      return bad(file, absl::StrCat("\"", key, "\" is out of range: ", it->dump()));
    }
    *out = it->get<int64_t>();
    return absl::OkStatus();
  };
  auto string = [&](const char* key, bool required, std::string* out) -> absl::Status {
    auto it = j.find(key);
    if (it == j.end()) {
      return required ? bad(file, absl::StrCat("missing key \"", key, "\"")) : absl::OkStatus();
    }
    if (!it->is_string()) {
      return bad(file, absl::StrCat("\"", key, "\" must be a string, not ", it->dump()));
    }
    *out = it->get<std::string>();
    return absl::OkStatus();
  };

  std::string format;
  if (absl::Status s = string("format", true, &format); !s.ok()) return s;
  if (format != kTokenFormat) {
    return bad(file, absl::StrCat("\"format\" is \"", format, "\", expected \"", kTokenFormat,
                                  "\" (not a troupe token dataset header)"));
  }
  int64_t version = 0;
  if (absl::Status s = integer("version", &version); !s.ok()) return s;
  if (version != kTokenFormatVersion) {
    return bad(file, absl::StrCat("\"version\" is ", version, "; this troupe reads version ",
                                  kTokenFormatVersion));
  }
  TokenDatasetHeader header;
  if (absl::Status s = integer("vocab_size", &header.vocab_size); !s.ok()) return s;
  if (header.vocab_size < 1 || header.vocab_size > kMaxVocabSize) {
    return bad(file, absl::StrCat("\"vocab_size\" is ", header.vocab_size, ", expected 1 to ",
                                  kMaxVocabSize));
  }
  if (absl::Status s = integer("num_tokens", &header.num_tokens); !s.ok()) return s;
  if (header.num_tokens < 0 || header.num_tokens > kMaxTokens) {
    return bad(file, absl::StrCat("\"num_tokens\" is ", header.num_tokens, ", expected 0 to ",
                                  kMaxTokens));
  }
  std::string dtype;
  if (absl::Status s = string("dtype", true, &dtype); !s.ok()) return s;
  header.dtype = dtype_for_vocab(header.vocab_size);
  if (dtype != dtype_name(header.dtype)) {
    return bad(file, absl::StrCat("\"dtype\" is \"", dtype, "\" but vocab_size ", header.vocab_size,
                                  " calls for \"", dtype_name(header.dtype),
                                  "\" (uint16 up to 65536 ids, else uint32)"));
  }
  if (absl::Status s = string("tokenizer", true, &header.tokenizer); !s.ok()) return s;
  if (absl::Status s = string("source", false, &header.source); !s.ok()) return s;
  if (j.contains("text_bytes")) {
    if (absl::Status s = integer("text_bytes", &header.text_bytes); !s.ok()) return s;
    if (header.text_bytes < 0 || header.text_bytes > kMaxTokens) {
      return bad(file, absl::StrCat("\"text_bytes\" is ", header.text_bytes, ", expected 0 to ",
                                    kMaxTokens));
    }
  }
  return header;
}

}  // namespace troupe::actors
