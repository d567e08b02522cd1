// The safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON - {"__metadata__": {string: string},
// NAME: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...} -
// padded with spaces to a multiple of 8, then the tensors' bytes, one after
// the other in the order given, offsets relative to the end of the header.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/env.h"
#include "nn/model/hf.h"

namespace troupe::checkpoint {

// A named float32 tensor, row-major (nn/model/hf.h: what a model's Hugging Face export holds).
using SafeTensor = nn::HfTensor;

// Writes `tensors` (float32) and `metadata` to `path` atomically (PATH.tmp,
// fsynced, renamed). InvalidArgument if a tensor's data does not match its
// shape or a name repeats; the Env's errors.
absl::Status write_safetensors(io::Env* env, const std::string& path,
                               const std::vector<SafeTensor>& tensors,
                               const std::map<std::string, std::string>& metadata);

// Reads a safetensors file: F32 tensors as they are, F16 and BF16 ones
// widened to float32 (exactly), integer and boolean ones (buffers such as a
// causal mask, not weights) skipped. DataLoss for anything else, naming the
// file.
absl::StatusOr<std::vector<SafeTensor>> read_safetensors(
    io::Env* env, const std::string& path, std::map<std::string, std::string>* metadata);

}  // namespace troupe::checkpoint
