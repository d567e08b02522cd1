// Where a model's parameters live: the model seam's view of one flat fp32 buffer, whatever the
// architecture (docs/models.md). Trainers, actors and checkpoints address parameters, gradients
// and optimizer state through this and nothing else; only an architecture (nn/gpt2, nn/llama)
// knows what its tensors compute.
//
// The buffer is the architecture's tensors, row-major, one after the other, grouped in segments
// that tile it in order:
//
//   [0]        the embedding: the token embedding [Vp/tp, C] first (every architecture puts it
//              at offset 0), then whatever else embeds (GPT-2's position table)
//   [1 + l]    block l, for l in [0, L): the parameters of blocks [a, b) are one range
//   [L + 1]    the head: the final norm and, when the head is not tied, its own [Vp/tp, C]
//
// A tied head computes the logits with the token embedding: a pipeline's last stage then needs a
// copy of it (tied_head()).
//
// Tensor parallelism (Megatron-LM) gives each of tp ranks a layout of the same tensors in the same
// order, each split tensor cut to the rank's slice (TensorSplit), every other whole on every rank.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nn/optim/param_range.h"

namespace troupe::nn {

// Rank `rank` of a tensor-parallel group of `size`: the slice of the model it holds.
struct TensorSlice {
  int rank = 0;
  int size = 1;

  friend bool operator==(const TensorSlice&, const TensorSlice&) = default;
};

// How a tensor is cut among tensor-parallel ranks.
enum class TensorSplit : int {
  kReplicated,  // whole on every rank
  kRows,        // dim 0 cut in tp contiguous pieces (column-parallel weights, the vocabulary)
  kQkvRows,     // dim 0 is three equal parts (q, k, v), each cut in tp pieces (a fused qkv)
  kColumns,     // dim 1 cut in tp contiguous pieces (row-parallel weights)
};

// What a segment of the buffer is.
enum class SegmentRole : int {
  kEmbedding,
  kBlock,
  kHead,
};

// One tensor of the buffer.
struct ParamTensor {
  std::string name;        // the architecture's ("h0.qkvw", "layers.0.attention.wq")
  size_t offset = 0;       // in floats from the start of the buffer
  size_t size = 0;         // in floats
  std::vector<int> shape;  // this layout's (a tensor-parallel rank's: its slice's)
  TensorSplit split = TensorSplit::kReplicated;
  bool decay = true;  // AdamW decays it (false for biases and norm weights)
};

struct Segment {
  SegmentRole role = SegmentRole::kBlock;
  int block = -1;  // for kBlock
  ParamRange range;
};

class ModelLayout {
 public:
  ModelLayout() = default;
  // How an architecture's blocks sit in its tensors: block l is tensors
  // [first_tensor + l * tensors_per_block, first_tensor + (l + 1) * tensors_per_block), the
  // embedding those before block 0, the head those after block L - 1.
  struct Blocks {
    size_t first_tensor = 0;
    size_t tensors_per_block = 0;
    // Indices within a block of the tensors that start each run its backward finishes, in the
    // order it finishes them (ending with 0, the block's first tensor).
    std::vector<size_t> backward_order;
    // Index within a block of the tensor after whose gradient its backward has almost nothing
    // left to compute (quiet_tail()).
    size_t quiet_tail = 0;
  };
  // REQUIRES: `tensors` tile [0, n) in order, each of its size and shape; blocks as above, with
  // num_layers >= 1 blocks and at least one tensor after them.
  ModelLayout(const TensorSlice& slice, int num_layers, std::vector<ParamTensor> tensors,
              const Blocks& blocks, bool tied_head);

  const TensorSlice& slice() const { return slice_; }
  int num_layers() const { return num_layers_; }
  size_t num_params() const { return num_params_; }
  // Every tensor, in buffer order.
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  // The index in tensors() of the tensor called `name`, or -1.
  int find(const std::string& name) const;

  // [embedding, block 0, ..., block L - 1, head], tiling the buffer. ZeRO-3 gathers and lets go
  // of parameters a segment at a time.
  const std::vector<Segment>& segments() const { return segments_; }
  // Their ranges, in order.
  std::vector<ParamRange> segment_ranges() const;
  // Offset of block l's first tensor, l in [0, L]; block_begin(L) is where the head starts.
  size_t block_begin(int l) const { return segments_[static_cast<size_t>(l) + 1].range.begin; }
  ParamRange embedding() const { return segments_.front().range; }
  ParamRange head() const { return segments_.back().range; }
  // The token embedding [Vp/tp, C]: the buffer's first tensor.
  ParamRange token_embedding() const { return {0, tensors_.front().size}; }
  // Whether the head computes the logits with token_embedding() (else it has its own tensor).
  bool tied_head() const { return tied_head_; }

  // Block l's offsets in the order its backward finishes them, each the start of a run of
  // tensors whose gradients are final from there on (Model::backward_blocks' on_final): the
  // first is the block's last layer, the last is block_begin(l).
  const std::vector<size_t>& backward_marks(int l) const {
    return backward_marks_[static_cast<size_t>(l)];
  }
  // The offset in block 0 after which its backward has almost nothing left to compute (the
  // attention's output projection: what comes after is one GEMM pair and a norm): data
  // parallelism keeps what follows it in a bucket of its own.
  size_t quiet_tail() const { return quiet_tail_; }

  // The tensors AdamW does not decay (ParamTensor::decay), as sorted disjoint ranges with
  // touching ones merged; for adamw_update's no_decay (cut to a shard with ranges_in_shard).
  std::vector<ParamRange> no_decay_ranges() const;

  // OK if [begin, end) lies in the buffer and cuts through no tensor; InvalidArgument naming the
  // tensor otherwise.
  [[nodiscard]] absl::Status check_range(size_t begin, size_t end) const;

 private:
  TensorSlice slice_;
  int num_layers_ = 0;
  size_t num_params_ = 0;
  std::vector<ParamTensor> tensors_;
  std::vector<Segment> segments_;
  bool tied_head_ = true;
  std::vector<std::vector<size_t>> backward_marks_;
  size_t quiet_tail_ = 0;
};

// Calls copy(whole_offset, slice_offset, n) for each run of n floats that the tensor-parallel
// layout `slice` holds of the whole model's layout `whole` (both of one config), in the slice's
// buffer order: the runs tile the slice's buffer. With slice.slice().size = 1 one run, the whole.
void for_each_slice_run(
    const ModelLayout& whole, const ModelLayout& slice,
    const std::function<void(size_t whole_offset, size_t slice_offset, size_t n)>& copy);
// The slice of `whole_buffer` (laid out as `whole`) into `slice_buffer` (laid out as `slice`),
// and back: what tensor-parallel ranks hold of a whole model, and a whole model made of them.
void copy_to_slice(const ModelLayout& whole, const ModelLayout& slice, const float* whole_buffer,
                   float* slice_buffer);
void copy_from_slice(const ModelLayout& whole, const ModelLayout& slice, const float* slice_buffer,
                     float* whole_buffer);

}  // namespace troupe::nn
