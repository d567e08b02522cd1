#include "trainers/export_tokenizer.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/env.h"
#include "text/file_text.h"
#include "text/tokenizer_files.h"

namespace troupe::trainers {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Hugging Face's name for one of GPT-2's files.
std::string hf_name(const std::string& file) {
  const std::string name = base_name(file);
  if (name == "encoder.json") return "vocab.json";
  if (name == "vocab.bpe") return "merges.txt";
  return name;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> export_tokenizer(
    const std::string& tokenizer_dir, const std::string& id, int model_max_length,
    const std::string& out_dir, const std::function<absl::Status(const std::string&)>& check) {
  std::vector<std::string> written;
  if (id == "bytes") return written;
  auto tok = text::open_saved_tokenizer(tokenizer_dir, id);
  if (!tok.ok()) return tok.status();
  io::Env* env = io::Env::posix();
  auto write = [&](const std::string& name, const std::string& bytes) -> absl::Status {
    const std::string path = absl::StrCat(out_dir, "/", name);
    if (absl::Status s = check(path); !s.ok()) return s;
    if (absl::Status s = io::write_file_atomically(env, path, bytes.data(), bytes.size());
        !s.ok()) {
      return s;
    }
    written.push_back(name);
    return absl::OkStatus();
  };
  const text::Tokenizer& t = **tok;
  nlohmann::ordered_json config;
  if (t.kind() == "gpt2") {
    for (const std::string& file : t.files()) {
      auto bytes = text::read_file_text(file);
      if (!bytes.ok()) return bytes.status();
      if (absl::Status s = write(hf_name(file), *bytes); !s.ok()) return s;
    }
    const std::string eot = t.end_of_text() ? t.decode(std::vector<int32_t>{*t.end_of_text()})
                                            : std::string("<|endoftext|>");
    config = {{"tokenizer_class", "GPT2Tokenizer"},
              {"bos_token", eot},
              {"eos_token", eot},
              {"unk_token", eot},
              {"add_prefix_space", false},
              {"model_max_length", model_max_length}};
  } else {
    auto bytes = text::read_file_text(t.files().front(), size_t{1} << 31);
    if (!bytes.ok()) return bytes.status();
    if (absl::Status s = write("tokenizer.model", *bytes); !s.ok()) return s;
    config = {{"tokenizer_class", "LlamaTokenizer"},
              {"bos_token", "<s>"},
              {"eos_token", "</s>"},
              {"unk_token", "<unk>"},
              {"add_bos_token", true},
              {"add_eos_token", false},
              {"model_max_length", model_max_length}};
  }
  config["troupe_tokenizer"] = id;
  if (absl::Status s = write("tokenizer_config.json", config.dump(2) + "\n"); !s.ok()) return s;
  return written;
}

}  // namespace troupe::trainers
