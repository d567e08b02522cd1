#include "trainers/run_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "actors/data/token_dataset.h"
#include "text/file_text.h"
#include "text/tokenizer_files.h"

namespace troupe::trainers {

absl::StatusOr<RunTokenizer> run_tokenizer(const TrainConfig& config) {
  RunTokenizer run;
  if (config.data.synthetic || config.data.path.empty()) return run;
  absl::StatusOr<actors::TokenDataset> data = actors::TokenDataset::open(config.data.path);
  if (!data.ok()) return data.status();
  run.id = data->header().tokenizer;
  const std::string dir = absl::StrCat(config.data.path, ".tokenizer");
  if (text::is_directory(dir)) run.files_dir = dir;
  return run;
}

absl::Status save_run_tokenizer(const RunTokenizer& tokenizer, const std::string& dir) {
  if (tokenizer.files_dir.empty()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<text::Tokenizer>> tok =
      text::open_saved_tokenizer(tokenizer.files_dir, tokenizer.id);
  if (!tok.ok()) return tok.status();
  return text::save_tokenizer(**tok, absl::StrCat(dir, "/tokenizer"));
}

}  // namespace troupe::trainers
