// llm.c's token files (karpathy/llm.c, dev/data/data_common.py), which its
// and nanoGPT-style data scripts write: one FILE.bin, a header of 256
// little-endian int32 - a magic, a version, the number of tokens, the rest
// zero - and then the tokens.
//
//   format   magic      version  tokens   vocabulary
//   gpt-2    20240520   1        uint16   GPT-2's 50,257 ids
//   llama-3  20240801   7        uint32   Llama 3's 128,256 ids
//
// TokenDataset::open reads such a file as it is (a path to a file that
// starts with either magic); write_llmc_file writes one from a dataset.
//
//   absl::StatusOr<TokenDataset> data = TokenDataset::open("fineweb_val_000000.bin");
//   absl::Status s = write_llmc_file(*data, LlmcFormat::kGpt2, "out.bin");
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/data/token_dataset_header.h"

namespace troupe::actors {

class TokenDataset;

enum class LlmcFormat { kGpt2, kLlama3 };

inline constexpr int kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;

struct LlmcFormatInfo {
  int32_t magic;
  int32_t version;
  TokenDtype dtype;
  int64_t vocab_size;
  const char* tokenizer;  // the TokenDatasetHeader's name for it
  const char* name;       // llm.c's model_desc
};
const LlmcFormatInfo& llmc_format_info(LlmcFormat format);
// The format whose magic `word` is (the file's first int32), if any.
bool is_llmc_magic(int32_t word);

// The dataset header of an llm.c file of `file_bytes` bytes whose first 256
// int32 are `header` (read from `file`, named in errors). InvalidArgument
// naming the file for: a magic of neither format, a version other than the
// format's, a negative token count, or a size other than the header's and
// the tokens' (truncated, or another kind of file).
absl::StatusOr<TokenDatasetHeader> parse_llmc_header(
    const std::array<int32_t, kLlmcHeaderInts>& header, uint64_t file_bytes,
    const std::string& file);

// The header of an llm.c file of `num_tokens` tokens in `format`.
// REQUIRES: 0 <= num_tokens < 2^31 (llm.c's limit).
std::array<int32_t, kLlmcHeaderInts> llmc_header(LlmcFormat format, int64_t num_tokens);

// Writes `data`'s tokens to `path` as an llm.c file of `format`, atomically
// (beside it, then renamed). InvalidArgument, writing nothing, when a token
// of `data` is not an id of the format's vocabulary or data holds 2^31
// tokens or more; the read's or the write's error otherwise.
absl::Status write_llmc_file(const TokenDataset& data, LlmcFormat format, const std::string& path);

}  // namespace troupe::actors
