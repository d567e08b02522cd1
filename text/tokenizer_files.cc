#include "text/tokenizer_files.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/io/env.h"
#include "text/file_text.h"

namespace troupe::text {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::Status save_tokenizer(const Tokenizer& tokenizer, const std::string& dir) {
  const std::vector<std::string> files = tokenizer.files();
  if (files.empty()) return absl::OkStatus();
  io::Env* env = io::Env::posix();
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  for (const std::string& file : files) {
    auto bytes = read_file_text(file, size_t{1} << 31);
    if (!bytes.ok()) return bytes.status();
    const std::string name =
        tokenizer.kind() == "sentencepiece" ? std::string("tokenizer.model") : base_name(file);
    if (absl::Status s = io::write_file_atomically(env, absl::StrCat(dir, "/", name), bytes->data(),
                                                   bytes->size());
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> open_saved_tokenizer(const std::string& dir,
                                                                const std::string& id) {
  if (id == "bytes") return open_tokenizer("bytes");
  if (!is_directory(dir)) {
    return absl::NotFoundError(absl::StrCat("the ", tokenizer_kind(id), " tokenizer (", id,
                                            ") should be in ", dir, ", which does not exist"));
  }
  auto tok = open_tokenizer(dir);
  if (!tok.ok()) return tok.status();
  if ((*tok)->id() != id) {
    return absl::FailedPreconditionError(
        absl::StrCat("the tokenizer in ", dir, " is ", (*tok)->id(), ", not ", id,
                     ", the one recorded with it: its files were altered or replaced"));
  }
  return tok;
}

}  // namespace troupe::text
