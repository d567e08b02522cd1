#include "text/gpt2_tokenizer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "text/digest.h"
#include "text/file_text.h"

namespace troupe::text {
namespace {

// GPT-2's bytes_to_unicode(): bytes that are printable Latin-1 stand for themselves; the other 68
// get the code points 256, 257, ... in byte order.
struct ByteMap {
  std::array<char32_t, 256> char_of{};
  absl::flat_hash_map<char32_t, unsigned char> byte_of;
  ByteMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      char_of[b] = printable ? static_cast<char32_t>(b) : next++;
      byte_of[char_of[b]] = static_cast<unsigned char>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap* map = new ByteMap();
  return *map;
}

void append_utf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The next code point of UTF-8 `s` at *i (advanced); nullopt for bytes that are not UTF-8.
std::optional<char32_t> next_utf8(absl::string_view s, size_t* i) {
  const auto c0 = static_cast<unsigned char>(s[*i]);
  const int extra = c0 < 0x80         ? 0
                    : (c0 >> 5) == 6  ? 1
                    : (c0 >> 4) == 14 ? 2
                    : (c0 >> 3) == 30 ? 3
                                      : -1;
  if (extra < 0 || *i + extra >= s.size()) return std::nullopt;
  char32_t c = extra == 0 ? c0 : (c0 & (0x3F >> extra));
  for (int k = 1; k <= extra; ++k) {
    const auto ck = static_cast<unsigned char>(s[*i + k]);
    if ((ck >> 6) != 2) return std::nullopt;
    c = (c << 6) | (ck & 0x3F);
  }
  *i += extra + 1;
  return c;
}

// What the vocabulary files say, before it is checked and built.
struct Gpt2Files {
  std::vector<std::pair<std::string, int32_t>> encoder;  // mapped text -> id
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> specials;  // texts marked special (tokenizer.json's added_tokens)
  std::vector<std::string> paths;
  std::string where;  // what errors name
};

absl::Status read_encoder(const std::string& path, Gpt2Files* files) {
  auto text = read_file_text(path);
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a JSON object of tokens and their ids"));
  }
  for (auto& [token, id] : json.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": token \"", token, "\" has id ", id.dump(), ", not an id"));
    }
    files->encoder.emplace_back(token, id.get<int32_t>());
  }
  return absl::OkStatus();
}

absl::Status read_merges(const std::string& path, Gpt2Files* files) {
  auto text = read_file_text(path);
  if (!text.ok()) return text.status();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && absl::StartsWith(line, "#version"))) continue;
    std::vector<absl::string_view> halves = absl::StrSplit(line, ' ');
    if (halves.size() != 2 || halves[0].empty() || halves[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", line_number, ": \"", line,
                                                     "\" is not a merge (two tokens and a space)"));
    }
    files->merges.emplace_back(halves[0], halves[1]);
  }
  return absl::OkStatus();
}

absl::Status read_tokenizer_json(const std::string& path, Gpt2Files* files) {
  auto text = read_file_text(path);
  if (!text.ok()) return text.status();
  nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  if (!json.is_object() || !json.contains("model") || !json["model"].is_object())
    return bad("not a Hugging Face tokenizer.json (no \"model\" object)");
  const nlohmann::json& model = json["model"];
  if (model.value("type", std::string()) != "BPE") {
    return bad(absl::StrCat("model type ", model.value("type", std::string("(none)")),
                            ": only BPE models (GPT-2's) are read as gpt2"));
  }
  const nlohmann::json& pre = json.contains("pre_tokenizer") ? json["pre_tokenizer"] : nullptr;
  if (!pre.is_object() || pre.value("type", std::string()) != "ByteLevel" ||
      pre.value("add_prefix_space", false) || !pre.value("use_regex", true)) {
    return bad(
        "the pre-tokenizer is not GPT-2's (ByteLevel, use_regex, no add_prefix_space): its "
        "pieces would differ");
  }
  if (!model.contains("vocab") || !model["vocab"].is_object()) return bad("model.vocab missing");
  for (auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 30))
      return bad(absl::StrCat("model.vocab: token \"", token, "\" has id ", id.dump()));
    files->encoder.emplace_back(token, id.get<int32_t>());
  }
  if (!model.contains("merges") || !model["merges"].is_array()) return bad("model.merges missing");
  for (const nlohmann::json& merge : model["merges"]) {
    if (merge.is_string()) {
      std::vector<std::string> halves = absl::StrSplit(merge.get<std::string>(), ' ');
      if (halves.size() != 2)
        return bad(absl::StrCat("merge ", merge.dump(), " is not two tokens"));
      files->merges.emplace_back(halves[0], halves[1]);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      files->merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return bad(absl::StrCat("merge ", merge.dump(), " is not two tokens"));
    }
  }
  if (json.contains("added_tokens") && json["added_tokens"].is_array()) {
    for (const nlohmann::json& added : json["added_tokens"]) {
      if (!added.is_object() || !added.value("special", false)) continue;
      const std::string content = added.value("content", std::string());
      const int64_t id = added.value("id", int64_t{-1});
      if (content.empty() || id < 0 || id >= (1 << 30))
        return bad(absl::StrCat("added token ", added.dump(), " has no content or id"));
      files->specials.push_back(content);
      bool in_vocab = false;
      for (const auto& [token, token_id] : files->encoder)
        in_vocab = in_vocab || (token == content && token_id == id);
      if (!in_vocab) files->encoder.emplace_back(content, static_cast<int32_t>(id));
    }
  }
  return absl::OkStatus();
}

// Which files `path` names: NotFound listing what was looked for.
absl::Status read_gpt2_files(const std::string& path, Gpt2Files* files) {
  if (!is_directory(path)) {
    files->paths = {path};
    files->where = path;
    return read_tokenizer_json(path, files);
  }
  const std::string dir = path.ends_with("/") ? path.substr(0, path.size() - 1) : path;
  for (auto [vocab, merges] :
       {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}}) {
    const std::string v = absl::StrCat(dir, "/", vocab), m = absl::StrCat(dir, "/", merges);
    if (!file_exists(v) && !file_exists(m)) continue;
    files->paths = {v, m};
    files->where = absl::StrCat(v, " + ", merges);
    if (absl::Status s = read_encoder(v, files); !s.ok()) return s;
    return read_merges(m, files);
  }
  const std::string json = absl::StrCat(dir, "/tokenizer.json");
  if (file_exists(json)) {
    files->paths = {json};
    files->where = json;
    return read_tokenizer_json(json, files);
  }
  return absl::NotFoundError(
      absl::StrCat(dir,
                   " holds no GPT-2 tokenizer: looked for encoder.json + vocab.bpe, vocab.json + "
                   "merges.txt and tokenizer.json (scripts/fetch_text.sh fetches GPT-2's)"));
}

}  // namespace

std::string map_bytes(absl::string_view bytes) {
  std::string out;
  for (char c : bytes)
    append_utf8(byte_map().char_of[static_cast<unsigned char>(c)], &out);
  return out;
}

std::optional<std::string> unmap_bytes(absl::string_view mapped) {
  std::string out;
  for (size_t i = 0; i < mapped.size();) {
    std::optional<char32_t> c = next_utf8(mapped, &i);
    if (!c) return std::nullopt;
    auto it = byte_map().byte_of.find(*c);
    if (it == byte_map().byte_of.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Gpt2Tokenizer>> Gpt2Tokenizer::open(const std::string& path) {
  Gpt2Files files;
  if (absl::Status s = read_gpt2_files(path, &files); !s.ok()) return s;
  auto bad = [&](const absl::Status& s) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.where, ": not a GPT-2 byte-level BPE vocabulary: ", s.message()));
  };
  // A token is ordinary when it is a byte or what a merge makes; the rest (<|endoftext|>) are
  // special: no merge makes them, and their text is matched before pre-tokenisation.
  absl::flat_hash_set<std::string> made;
  for (const auto& [a, b] : files.merges)
    made.insert(absl::StrCat(a, b));
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  for (auto& [mapped, id] : files.encoder) {
    std::optional<std::string> bytes = unmap_bytes(mapped);
    const bool is_byte = bytes && bytes->size() == 1;
    const bool special =
        std::find(files.specials.begin(), files.specials.end(), mapped) != files.specials.end() ||
        !bytes || (!is_byte && !made.contains(mapped));
    absl::Status s = special ? tok->vocab_.add_special(mapped, id)
                             : tok->vocab_.add_token(std::move(*bytes), id);
    if (!s.ok()) return bad(s);
  }
  for (const auto& [a, b] : files.merges) {
    std::optional<std::string> first = unmap_bytes(a), second = unmap_bytes(b);
    if (!first || !second) {
      return bad(absl::InvalidArgumentError(
          absl::StrCat("merge \"", a, " ", b, "\" has a character that stands for no byte")));
    }
    if (absl::Status s = tok->vocab_.add_merge(*first, *second); !s.ok()) return bad(s);
  }
  if (absl::Status s = tok->vocab_.finish(); !s.ok()) return bad(s);
  tok->end_of_text_ = tok->vocab_.special("<|endoftext|>");
  tok->files_ = std::move(files.paths);
  tok->id_ = absl::StrCat("gpt2-", sha256_hex(tok->vocab_.canonical()).substr(0, 10));
  return tok;
}

void Gpt2Tokenizer::encode(absl::string_view text, std::vector<int32_t>* out) const {
  pretokenizer_.for_each_piece(
      text, [&](absl::string_view piece, bool) { vocab_.encode_piece(piece, out); });
}

void Gpt2Tokenizer::encode_with_special(absl::string_view text, std::vector<int32_t>* out) const {
  encode_around(text, vocab_.specials(), out);
}

std::string Gpt2Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id >= 0 && id < vocab_.vocab_size()) {
      text += vocab_.bytes_of(id);
    } else {
      absl::StrAppend(&text, "<|", id, "|>");
    }
  }
  return text;
}

}  // namespace troupe::text
