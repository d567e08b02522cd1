#include "actors/data/llmc_format.h"

#include <bit>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/data/token_dataset.h"
#include "core/io/env.h"

namespace troupe::actors {

static_assert(std::endian::native == std::endian::little,
              "llm.c files are little-endian and are read and written as they are");

namespace {

constexpr LlmcFormatInfo kGpt2 = {.magic = 20240520,
                                  .version = 1,
                                  .dtype = TokenDtype::kUint16,
                                  .vocab_size = 50257,
                                  .tokenizer = "gpt2",
                                  .name = "gpt-2"};
constexpr LlmcFormatInfo kLlama3 = {.magic = 20240801,
                                    .version = 7,
                                    .dtype = TokenDtype::kUint32,
                                    .vocab_size = 128256,
                                    .tokenizer = "llama3",
                                    .name = "llama-3"};

template <class T>
absl::Status append_tokens(std::span<const int32_t> tokens, io::WritableFile& file) {
  std::vector<T> narrow(tokens.begin(), tokens.end());
  return file.append(narrow.data(), narrow.size() * sizeof(T));
}

}  // namespace

const LlmcFormatInfo& llmc_format_info(LlmcFormat format) {
  return format == LlmcFormat::kGpt2 ? kGpt2 : kLlama3;
}

bool is_llmc_magic(int32_t word) {
  return word == kGpt2.magic || word == kLlama3.magic;
}

absl::StatusOr<TokenDatasetHeader> parse_llmc_header(
    const std::array<int32_t, kLlmcHeaderInts>& header, uint64_t file_bytes,
    const std::string& file) {
  const LlmcFormatInfo* info = header[0] == kGpt2.magic     ? &kGpt2
                               : header[0] == kLlama3.magic ? &kLlama3
                                                            : nullptr;
  if (info == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": magic ", header[0], " is not llm.c's (",
                                                   kGpt2.magic, " for gpt-2 tokens, ",
                                                   kLlama3.magic, " for llama-3 tokens)"));
  }
  if (header[1] != info->version) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": llm.c ", info->name,
                                                   " file of version ", header[1], "; version ",
                                                   info->version, " is the one read"));
  }
  const int64_t n = header[2];
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": a token count of ", n));
  }
  const uint64_t expected =
      static_cast<uint64_t>(kLlmcHeaderBytes) + static_cast<uint64_t>(n) * dtype_bytes(info->dtype);
  if (file_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": ", file_bytes, " bytes, but its llm.c header says ", n, " ",
        dtype_name(info->dtype), " tokens (", expected, " bytes); truncated or not llm.c's?"));
  }
  return TokenDatasetHeader{.dtype = info->dtype,
                            .vocab_size = info->vocab_size,
                            .num_tokens = n,
                            .tokenizer = info->tokenizer,
                            .source = absl::StrCat("llm.c ", info->name, " file")};
}

std::array<int32_t, kLlmcHeaderInts> llmc_header(LlmcFormat format, int64_t num_tokens) {
  const LlmcFormatInfo& info = llmc_format_info(format);
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[0] = info.magic;
  header[1] = info.version;
  header[2] = static_cast<int32_t>(num_tokens);
  return header;
}

absl::Status write_llmc_file(const TokenDataset& data, LlmcFormat format, const std::string& path) {
  const LlmcFormatInfo& info = llmc_format_info(format);
  if (data.num_tokens() >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(data.name(), ": ", data.num_tokens(),
                                                   " tokens; an llm.c file holds fewer than 2^31"));
  }
  return io::write_file_atomically(
      io::Env::posix(), path, [&](io::WritableFile& file) -> absl::Status {
        const std::array<int32_t, kLlmcHeaderInts> header = llmc_header(format, data.num_tokens());
        if (absl::Status s = file.append(header.data(), sizeof(header)); !s.ok()) return s;
        return data.for_each_chunk(
            [&](int64_t offset, std::span<const int32_t> tokens) -> absl::Status {
              for (size_t k = 0; k < tokens.size(); ++k) {
                if (tokens[k] >= info.vocab_size) {
                  return absl::InvalidArgumentError(absl::StrCat(
                      data.name(), ": token ", offset + static_cast<int64_t>(k), " is ", tokens[k],
                      ", not an id of llm.c's ", info.name, " vocabulary (", info.vocab_size, ")"));
                }
              }
              return info.dtype == TokenDtype::kUint16 ? append_tokens<uint16_t>(tokens, file)
                                                       : append_tokens<uint32_t>(tokens, file);
            });
      });
}

}  // namespace troupe::actors
