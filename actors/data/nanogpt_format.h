// nanoGPT's token files as its prepare.py scripts write them: DIR/train.bin and DIR/val.bin, the
// tokens as flat little-endian uint16 with no header, and for a character-level dataset
// DIR/meta.pkl, a pickled {"vocab_size": V, "itos": ..., "stoi": ...}. Without meta.pkl the tokens
// are GPT-2's (nanoGPT's own rule: its sample.py then uses GPT-2's encoding).
//
// TokenDataset::open reads such a file where it is named by its path (a FILE.bin with no llm.c
// magic and no troupe header FILE.json beside it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "actors/data/token_dataset_header.h"

namespace troupe::actors {

// The vocab_size a meta.pkl holds: the integer pickled right after the key "vocab_size". nullopt
// when there is no such key or no integer after it.
std::optional<int64_t> nanogpt_meta_vocab_size(absl::string_view pickle);

// The header of nanoGPT file `path` of `file_bytes` bytes: vocab_size from DIR/meta.pkl (its
// tokenizer "nanogpt-char"), else GPT-2's 50257 ("gpt2"); uint16; num_tokens = file_bytes / 2.
// InvalidArgument naming the file for an odd size, or a meta.pkl without a vocab_size of at most
// 65536 (uint16 ids).
absl::StatusOr<TokenDatasetHeader> nanogpt_header(const std::string& path, uint64_t file_bytes);

}  // namespace troupe::actors
