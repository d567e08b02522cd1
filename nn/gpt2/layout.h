// The GPT model's configuration and where each parameter tensor lives in its flat buffer
// (llm.c's ParameterTensors). Shapes: C = channels, L = layers, V = vocabulary, Vp = padded
// vocabulary, maxT = max sequence length.
//
// Buffer order (row-major tensors, one after the other):
//   wte [Vp, C], wpe [maxT, C],
//   block 0: ln1w [C], ln1b [C], qkvw [3C, C], qkvb [3C], attprojw [C, C], attprojb [C],
//            ln2w [C], ln2b [C], fcw [4C, C], fcb [4C], fcprojw [C, 4C], fcprojb [C],
//   block 1 ... block L-1 (the same 12 tensors),
//   lnfw [C], lnfb [C].
// Unlike llm.c, which stacks each block tensor over the layers, a block's tensors are
// contiguous: the parameters of blocks [a, b) are the one range [block_begin(a), block_begin(b)).
// The LM head has no tensor of its own: it is wte (tied).
//
// Tensor parallelism (Megatron-LM) gives each of tp ranks a layout of the same tensors in the same
// order, the split ones cut to the rank's slice (TensorSplit): wte [Vp/tp, C] (rows of the
// vocabulary), qkvw [3C/tp, C] and qkvb (the rank's heads' rows of each of q, k and v), attprojw
// [C, C/tp] (its heads' columns), fcw [4C/tp, C] and fcb (rows), fcprojw [C, 4C/tp] (columns);
// every other tensor is replicated whole on every rank.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nn/gpt2/config.h"
#include "nn/model/layout.h"
#include "nn/optim/param_range.h"

namespace troupe::nn {

// OK, or InvalidArgument naming what does not divide: the heads and the padded vocabulary must
// split evenly over slice.size ranks, and 0 <= rank < size.
[[nodiscard]] absl::Status validate_slice(const GPTConfig& config, const TensorSlice& slice);

// A block's tensors, in buffer order.
enum class BlockTensor : int {
  kLn1w,
  kLn1b,
  kQkvw,
  kQkvb,
  kAttprojw,
  kAttprojb,
  kLn2w,
  kLn2b,
  kFcw,
  kFcb,
  kFcprojw,
  kFcprojb,
};
inline constexpr int kNumBlockTensors = 12;

// The tensors are named "wte", "wpe", "h<l>.<name>" for block l (names as in BlockTensor, lower
// case: "h0.qkvw"), "lnfw", "lnfb".
class GPTParamLayout {
 public:
  GPTParamLayout() = default;
  // The layout of tensor-parallel rank slice.rank of slice.size (the whole model by default).
  // REQUIRES: config.validate() and validate_slice(config, slice) are OK.
  explicit GPTParamLayout(const GPTConfig& config, const TensorSlice& slice = {});

  const TensorSlice& slice() const { return slice_; }
  int num_layers() const { return num_layers_; }
  size_t num_params() const { return num_params_; }
  size_t wte() const { return 0; }
  size_t wpe() const { return wpe_; }
  // Offset of block l's first tensor, l in [0, L]; block_begin(L) is where lnfw starts.
  size_t block_begin(int l) const { return block0_ + static_cast<size_t>(l) * block_size_; }
  size_t block_size() const { return block_size_; }
  size_t block_tensor(int l, BlockTensor t) const {
    return block_begin(l) + block_offsets_[static_cast<int>(t)];
  }
  size_t lnfw() const { return lnfw_; }
  size_t lnfb() const { return lnfw_ + channels_; }
  // Every tensor, in buffer order.
  const std::vector<ParamTensor>& tensors() const { return model_.tensors(); }
  // The seam's view: segments [wte wpe] [block 0] ... [lnfw lnfb], a tied head; the 1-D tensors
  // (biases and LayerNorm weights) not decayed, as in GPT-2 training (nanoGPT, llm.c).
  const ModelLayout& model() const { return model_; }

 private:
  TensorSlice slice_;
  int num_layers_ = 0;
  size_t channels_ = 0;
  size_t wpe_ = 0;
  size_t block0_ = 0;
  size_t block_size_ = 0;
  size_t block_offsets_[kNumBlockTensors] = {};
  size_t lnfw_ = 0;
  size_t num_params_ = 0;
  ModelLayout model_;
};

struct GPTBlockTensors {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;
};

// Pointers to every tensor of one buffer laid out as a GPTParamLayout (parameters or gradients).
struct GPTTensors {
  float* wte = nullptr;
  float* wpe = nullptr;
  std::vector<GPTBlockTensors> blocks;  // L
  float* lnfw = nullptr;
  float* lnfb = nullptr;
};

// REQUIRES: base holds layout.num_params() floats; they stay owned by the caller.
GPTTensors point_gpt_tensors(const GPTParamLayout& layout, float* base);

// Points the tensors of `tensors` that lie in [begin, end) of the layout at
// `base`, which holds that range of a buffer laid out as the layout (the
// tensor at offset o goes to base + o - begin); the others are left alone.
// InvalidArgument, changing nothing, if a tensor straddles begin or end, or
// the range is not within the buffer.
absl::Status rebind_gpt_tensors(const GPTParamLayout& layout, size_t begin, size_t end, float* base,
                                GPTTensors* tensors);

}  // namespace troupe::nn
