// The trained weights as `troupe train` writes them and `troupe generate`
// reads them: DIR/model.json (the model config and what the buffer holds) and
// DIR/model.bin (the fp32 parameters, little-endian, in the model's flat
// layout, nn/model/layout.h). "model" is the config's one codec's
// (nn/model/config_json.h); files of format "troupe-gpt" (before there was
// more than one architecture) read the same.
//
//   {"format": "troupe-model", "version": 1, "dtype": "float32", "num_params": 104960,
//    "model": {"type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "seq_len": 32,
//              "vocab_size": 256, "padded_vocab_size": 256},
//    "step": 600, "tokenizer": "bytes"}
//
// A ZeRO-3 run that does not consolidate its weights on save
// (stage3_gather_16bit_weights_on_model_save false, DeepSpeed's default)
// writes each rank's partition instead of model.bin: DIR/model.part-R-of-N.bin
// for R in [0, N), with "partitions": [their sizes in floats] in model.json.
// load_model joins them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainers/config.h"

namespace troupe::trainers {

struct SavedModel {
  nn::ModelConfig model;
  std::vector<float> params;
  int64_t step = 0;
  std::string tokenizer = "bytes";
  // Empty: one DIR/model.bin. Else the sizes of the parts the parameters are
  // saved in, in order (see above); they add up to the parameter count.
  std::vector<size_t> partitions;
};

// "model.part-R-of-N.bin".
std::string partition_file_name(size_t r, size_t n);

// Writes DIR/model.json and DIR/model.bin (creating DIR; each file written
// to a temporary name, then renamed). InvalidArgument if params does not
// match the model; Internal (with errno's text) on I/O failure.
absl::Status save_model(const std::string& dir, const SavedModel& saved);
// Reads them back; NotFound naming a missing file, DataLoss for a header that
// is not ours, a buffer of the wrong size, or a parameter that is NaN or
// infinite (a diverged run's weights are refused, not generated from).
absl::StatusOr<SavedModel> load_model(const std::string& dir);

// The header of model.json alone (its `params` empty) and the number of
// parameters model.bin must hold. DataLoss naming `where` for anything else:
// not JSON, not ours, dimensions beyond the config's bounds (config.h), a
// parameter count that does not match. At most kMaxModelHeaderBytes.
inline constexpr size_t kMaxModelHeaderBytes = 1 << 20;
absl::StatusOr<std::pair<SavedModel, size_t>> parse_model_header(const std::string& text,
                                                                 const std::string& where);

}  // namespace troupe::trainers
