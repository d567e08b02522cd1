// An owner's file of a checkpoint and reading state back from any layout.
//
// write_shard_file writes the arrays of one owner (its range of the masters
// and of each optimizer state), one after the other, into DIR/NAME: first
// DIR/NAME.tmp, checksummed while written, fsynced, closed, then renamed and
// the directory fsynced. It returns the manifest entries of the file.
//
// read_state assembles any range of a state from the owners that saved it,
// through the model's whole tensors, so a range of another layout - another
// dp, ZeRO stage, pipeline split or tensor slicing - reads what it needs from
// whichever files hold it. Every entry it reads from is read whole and
// checked against its xxh64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "core/io/env.h"

namespace troupe::checkpoint {

struct StateArray {
  std::string state;  // kParamState, ...
  const float* data = nullptr;
  size_t n = 0;
};

// The entries of the written file, in the order of `arrays` (each of them
// the same length). ResourceExhausted on ENOSPC; Internal for other I/O
// failures; either way DIR/NAME is untouched and NAME.tmp removed.
// `await_bytes`, when given, is called before each piece is read from the
// arrays with the file offset where the piece ends, and returns once the
// arrays hold the file's bytes up to there: a caller may write the arrays
// while they are being written out, in file order.
absl::StatusOr<std::vector<ShardEntry>> write_shard_file(
    io::Env* env, const std::string& dir, const std::string& name,
    const std::vector<StateArray>& arrays, const std::function<void(uint64_t)>& await_bytes = {});

// Elements [begin, end) of `state` in the buffer of tensor slice `slice` of
// `model` (nn/gpt_param_layout.h; TensorSlice{}: the whole model's buffer), into
// out[0, end - begin), from the checkpoint `manifest` in `step_dir`, whatever
// its dp, pp, tp and ZeRO stage. InvalidArgument if the checkpoint is of
// another model, holds no such state, or the slice or range is not one of
// the model; an I/O error other than a missing or short file as it is (not
// the data's fault); DataLoss "STEP: FILE: ..." for a missing or short file
// or a checksum mismatch.
absl::Status read_state(io::Env* env, const std::string& step_dir, const Manifest& manifest,
                        const std::string& state, const nn::ModelConfig& model,
                        const nn::TensorSlice& slice, int64_t begin, int64_t end, float* out);

// Checks that every file the manifest names is there and long enough
// (stat-cheap; checksums are checked as state is read). DataLoss as above.
absl::Status check_files(io::Env* env, const std::string& step_dir, const Manifest& manifest);

// Reads every entry of every file and checks its xxh64. DataLoss as above.
absl::Status verify_checksums(io::Env* env, const std::string& step_dir, const Manifest& manifest);

}  // namespace troupe::checkpoint
