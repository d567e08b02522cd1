// The manifest of a checkpoint: DIR/step-NNNNNNNN/manifest.json, everything
// needed to resume a job exactly or to load its state into another layout
// (docs/checkpoint.md has the format with an example).
//
// State is addressed by global names and ranges, as PyTorch DCP and
// DeepSpeed's universal checkpoints do. Each tensor slice t of tp has a flat
// buffer (nn/model/layout.h: the layout of slice t; tp = 1: the model's
// buffer), which the pipeline stages' ranges tile. `tensors` names every
// parameter tensor of every slice: its global shape, how tensor parallelism
// splits it, the stage p that owns it and where slice t holds its part. Each
// owner (a parameter shard at mesh coordinate d.p.t) wrote one file holding,
// for the range [begin, end) of slice t's buffer it owns, one entry per kind
// of state: "param" (the fp32 masters), and the optimizer's "exp_avg" and
// "exp_avg_sq" (AdamW) or "momentum_buffer" (SGD), each with its byte offset
// and length in the file and its xxh64.
//
// A loader of any layout maps each range it needs, through the model's
// global tensors, to the owners that hold it; replicas of a range (DDP)
// saved it once, and a tensor every slice holds whole (a norm's) is
// read from slice 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nn/model/config.h"
#include "nn/model/layout.h"
#include "nn/optim/loss_scaler.h"

namespace troupe::checkpoint {

inline constexpr char kManifestFormat[] = "troupe-checkpoint";
inline constexpr int kManifestVersion = 1;
inline constexpr size_t kMaxManifestBytes = 64 << 20;
inline constexpr size_t kMaxShards = 1 << 16;
inline constexpr size_t kMaxTensors = 1 << 20;

// The kinds of state an owner's file holds, in file order.
inline constexpr char kParamState[] = "param";
inline constexpr char kExpAvgState[] = "exp_avg";
inline constexpr char kExpAvgSqState[] = "exp_avg_sq";
inline constexpr char kMomentumState[] = "momentum_buffer";

struct MeshLayout {
  int dp = 1;
  int pp = 1;  // the stages as saved: under interleaved 1F1B each chunk is one
  int tp = 1;
  int zero_stage = 0;
  // The model chunks a pipeline stage held (interleaved 1F1B; 1 otherwise,
  // and in manifests that predate it): pp / virtual_stages physical stages.
  int virtual_stages = 1;
  friend bool operator==(const MeshLayout&, const MeshLayout&) = default;
};

// A mesh coordinate (actors/mesh.h's Coordinate; this layer does not see actors).
struct Owner {
  int d = 0;
  int p = 0;
  int t = 0;
  friend bool operator==(const Owner&, const Owner&) = default;
};
// "d1.p0.t0", as actors name coordinates.
std::string to_string(const Owner& owner);

struct TensorRecord {
  std::string name;            // the architecture's (nn::ModelLayout's tensors)
  std::vector<int64_t> shape;  // global
  std::string dtype = "float32";
  // How tp slices split it (nn::TensorSplit): "replicated" (whole in every
  // slice), "rows", "qkv_rows" or "columns"; with tp = 1 the slice is whole.
  std::string split;
  int p = 0;           // the pipeline stage that owns it
  int t = 0;           // the slice whose buffer holds this part of it
  int64_t offset = 0;  // in elements, in that buffer
  int64_t size = 0;    // elements: the product of `shape` over tp when split
  friend bool operator==(const TensorRecord&, const TensorRecord&) = default;
};

struct ShardEntry {
  std::string state;    // kParamState, ...
  uint64_t offset = 0;  // bytes, in the owner's file
  uint64_t length = 0;  // bytes: 4 x (end - begin)
  uint64_t xxh64 = 0;   // of those bytes, seed 0
  friend bool operator==(const ShardEntry&, const ShardEntry&) = default;
};

struct ShardRecord {
  std::string file;  // in the step's directory: "shard-d0.p0.t0.bin"
  Owner owner;
  int64_t begin = 0;  // the range of the (p, t) buffer it holds
  int64_t end = 0;
  std::vector<ShardEntry> entries;
  friend bool operator==(const ShardRecord&, const ShardRecord&) = default;
};

struct OptimizerRecord {
  std::string type;     // "adamw" or "sgd"
  int64_t updates = 0;  // updates applied (AdamW's bias correction counts them)
  friend bool operator==(const OptimizerRecord&, const OptimizerRecord&) = default;
};

// Where the data stands after the checkpoint's step (actors/data/sampler.h).
struct DataCursor {
  int64_t position = 0;  // global samples consumed
  int64_t epoch = 0;
  int64_t samples_per_epoch = 0;  // of the saving run's sampler (to rebase on a new dp)
  friend bool operator==(const DataCursor&, const DataCursor&) = default;
};

// The seeds everything random in a run derives from: the initialisation and
// the epochs' permutations. Training draws nothing else (no dropout), so
// these and the cursor are the whole random state.
struct RngState {
  uint64_t seed = 0;       // training.seed: initialisation and the data order
  uint64_t task_seed = 0;  // a synthetic task's own seed (0: none)
  friend bool operator==(const RngState&, const RngState&) = default;
};

struct Manifest {
  int64_t step = 0;           // the last step finished; a resumed run continues at step + 1
  int64_t applied_steps = 0;  // updates applied: the schedule's position
  nn::ModelConfig model;
  MeshLayout layout;
  std::vector<TensorRecord> tensors;
  std::vector<ShardRecord> shards;
  OptimizerRecord optimizer;
  DataCursor data;
  RngState rng;
  std::optional<nn::LossScalerState> loss_scaler;  // dynamic fp16 loss scaling only
  uint64_t config_hash = 0;                        // xxh64 of the training config's JSON
  std::string config;                              // that JSON
  // The id of the tokenizer the data was made with (text/tokenizer.h: "bytes", "gpt2-8f7b4b3c0d");
  // its files are in the checkpoint directory's tokenizer/. "bytes" when the key is absent (a
  // manifest from before tokenizers).
  std::string tokenizer = "bytes";
  int64_t created_ms = 0;  // wall clock, ms since the epoch
};

// The tensor records of `model` split over `tp` slices: slice 0's tensors in
// buffer order, then slice 1's, ... Each is owned by the stage whose range
// of `stages` (the pipeline stages' parameter ranges, tiling a slice's
// buffer in order; empty: one stage) holds its offset.
// REQUIRES: nn::validate_slice(model, {0, tp}) is OK.
std::vector<TensorRecord> tensor_records(const nn::ModelConfig& model, int tp = 1,
                                         const std::vector<nn::ParamRange>& stages = {});
// The name of a split in the manifest ("qkv_rows").
std::string split_name(nn::TensorSplit split);

// Indented JSON, with "manifest_xxh64": the xxh64 of the same JSON without
// that key, so that any change to the file is detected.
std::string encode_manifest(const Manifest& manifest);
// The manifest back, checked: DataLoss naming `where` and the key for text
// that is not JSON, not ours, of another version, whose manifest_xxh64 does
// not match (unless !verify_checksum: the fuzz target's way past it), a
// missing or mistyped key,
// a model the config codec (nn/model/config_json.h) refuses or that does not split over tp,
// tensors that are not the model's (the stages owning them out of order), or
// shards whose ranges or entries do not fit (an entry's length is not 4 x its
// range, entries overlap in their file, a range outside its slice's buffer,
// two owners of one file, a slice's buffer not tiled). At most
// kMaxManifestBytes. A manifest written before tensors had "split" (tp = 1)
// reads as if it had it.
absl::StatusOr<Manifest> decode_manifest(const std::string& text, const std::string& where,
                                         bool verify_checksum = true);

// The hex form of an xxh64 as the manifest writes it ("a3f0...", 16 digits).
std::string hex64(uint64_t value);

}  // namespace troupe::checkpoint
