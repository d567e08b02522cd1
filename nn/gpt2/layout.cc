#include "nn/gpt2/layout.h"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "absl/strings/str_cat.h"

namespace troupe::nn {
namespace {

constexpr const char* kBlockTensorNames[kNumBlockTensors] = {
    "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw",  "fcb",  "fcprojw",  "fcprojb",
};

// How each of a block's tensors is cut among tensor-parallel ranks, in buffer order: q, k, v and
// fc by output rows (column-parallel), attproj and fcproj by input columns (row-parallel).
constexpr TensorSplit kBlockSplits[kNumBlockTensors] = {
    TensorSplit::kReplicated, TensorSplit::kReplicated, TensorSplit::kQkvRows,
    TensorSplit::kQkvRows,    TensorSplit::kColumns,    TensorSplit::kReplicated,
    TensorSplit::kReplicated, TensorSplit::kReplicated, TensorSplit::kRows,
    TensorSplit::kRows,       TensorSplit::kColumns,    TensorSplit::kReplicated,
};

// Shapes of a block's tensors, in buffer order, for tensor-parallel ranks of tp.
std::vector<std::vector<int>> block_shapes(int C, int tp) {
  const int Cl = C / tp;
  return {{C}, {C}, {3 * Cl, C}, {3 * Cl}, {C, Cl},     {C},
          {C}, {C}, {4 * Cl, C}, {4 * Cl}, {C, 4 * Cl}, {C}};
}

size_t numel(const std::vector<int>& shape) {
  size_t n = 1;
  for (int d : shape)
    n *= static_cast<size_t>(d);
  return n;
}

}  // namespace

absl::Status validate_slice(const GPTConfig& config, const TensorSlice& slice) {
  if (slice.size < 1 || slice.rank < 0 || slice.rank >= slice.size) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: tensor-parallel rank ", slice.rank, " of ",
                                                   slice.size, " is not a rank"));
  }
  if (config.num_heads % slice.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: num_heads = ", config.num_heads,
                                                   " does not split over tensor-parallel size ",
                                                   slice.size));
  }
  if (config.padded_vocab() % slice.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPT: the padded vocabulary ", config.padded_vocab(),
        " does not split over tensor-parallel size ", slice.size,
        " (pad it to a multiple: padded_vocab_size, as Megatron's make-vocab-size-divisible-by)"));
  }
  return absl::OkStatus();
}

GPTParamLayout::GPTParamLayout(const GPTConfig& config, const TensorSlice& slice)
    : slice_(slice), num_layers_(config.num_layers), channels_(config.channels) {
  const int C = config.channels, tp = slice.size;
  std::vector<ParamTensor> tensors;
  auto add = [&](std::string name, std::vector<int> shape, TensorSplit split) {
    size_t offset = num_params_;
    num_params_ += numel(shape);
    const bool decay = shape.size() != 1;  // biases and LayerNorm weights are not decayed
    tensors.push_back({std::move(name), offset, numel(shape), std::move(shape), split, decay});
  };
  add("wte", {config.padded_vocab() / tp, C}, TensorSplit::kRows);
  wpe_ = num_params_;
  add("wpe", {config.max_seq_len, C}, TensorSplit::kReplicated);
  block0_ = num_params_;
  std::vector<std::vector<int>> shapes = block_shapes(C, tp);
  for (int l = 0; l < config.num_layers; ++l) {
    for (int t = 0; t < kNumBlockTensors; ++t) {
      if (l == 0) block_offsets_[t] = num_params_ - block0_;
      add(absl::StrCat("h", l, ".", kBlockTensorNames[t]), shapes[t], kBlockSplits[t]);
    }
    if (l == 0) block_size_ = num_params_ - block0_;
  }
  lnfw_ = num_params_;
  add("lnfw", {C}, TensorSplit::kReplicated);
  add("lnfb", {C}, TensorSplit::kReplicated);
  // GPT::block_backward finishes a block's layers in this order.
  ModelLayout::Blocks blocks;
  blocks.first_tensor = 2;
  blocks.tensors_per_block = kNumBlockTensors;
  for (BlockTensor t : {BlockTensor::kFcprojw, BlockTensor::kFcw, BlockTensor::kLn2w,
                        BlockTensor::kAttprojw, BlockTensor::kQkvw, BlockTensor::kLn1w}) {
    blocks.backward_order.push_back(static_cast<size_t>(t));
  }
  blocks.quiet_tail = static_cast<size_t>(BlockTensor::kAttprojw);
  model_ = ModelLayout(slice, config.num_layers, std::move(tensors), blocks, /*tied_head=*/true);
}

GPTTensors point_gpt_tensors(const GPTParamLayout& layout, float* base) {
  GPTTensors t;
  t.wte = base + layout.wte();
  t.wpe = base + layout.wpe();
  for (int l = 0; l < layout.num_layers(); ++l) {
    auto at = [&](BlockTensor bt) { return base + layout.block_tensor(l, bt); };
    t.blocks.push_back({at(BlockTensor::kLn1w), at(BlockTensor::kLn1b), at(BlockTensor::kQkvw),
                        at(BlockTensor::kQkvb), at(BlockTensor::kAttprojw),
                        at(BlockTensor::kAttprojb), at(BlockTensor::kLn2w), at(BlockTensor::kLn2b),
                        at(BlockTensor::kFcw), at(BlockTensor::kFcb), at(BlockTensor::kFcprojw),
                        at(BlockTensor::kFcprojb)});
  }
  t.lnfw = base + layout.lnfw();
  t.lnfb = base + layout.lnfb();
  return t;
}

absl::Status rebind_gpt_tensors(const GPTParamLayout& layout, size_t begin, size_t end, float* base,
                                GPTTensors* tensors) {
  if (begin > end || end > layout.num_params()) {
    return absl::InvalidArgumentError(absl::StrCat("GPT: range [", begin, ", ", end,
                                                   ") is not within the ", layout.num_params(),
                                                   " parameters"));
  }
  const std::vector<ParamTensor>& all = layout.tensors();
  for (const ParamTensor& t : all) {
    const size_t t_end = t.offset + t.size;
    const bool inside = t.offset >= begin && t_end <= end;
    const bool outside = t_end <= begin || t.offset >= end;
    if (!inside && !outside) {
      return absl::InvalidArgumentError(absl::StrCat("GPT: range [", begin, ", ", end,
                                                     ") cuts through tensor ", t.name, " [",
                                                     t.offset, ", ", t_end, ")"));
    }
  }
  // Tensor i of the layout is, in buffer order: wte, wpe, the blocks' 12 each, lnfw, lnfb.
  for (size_t i = 0; i < all.size(); ++i) {
    const ParamTensor& t = all[i];
    if (t.offset < begin || t.offset + t.size > end || t.size == 0) continue;
    float* p = base + (t.offset - begin);
    if (i == 0) {
      tensors->wte = p;
    } else if (i == 1) {
      tensors->wpe = p;
    } else if (i == all.size() - 2) {
      tensors->lnfw = p;
    } else if (i == all.size() - 1) {
      tensors->lnfb = p;
    } else {
      const size_t l = (i - 2) / kNumBlockTensors, k = (i - 2) % kNumBlockTensors;
      float** slots[kNumBlockTensors] = {
          &tensors->blocks[l].ln1w, &tensors->blocks[l].ln1b,     &tensors->blocks[l].qkvw,
          &tensors->blocks[l].qkvb, &tensors->blocks[l].attprojw, &tensors->blocks[l].attprojb,
          &tensors->blocks[l].ln2w, &tensors->blocks[l].ln2b,     &tensors->blocks[l].fcw,
          &tensors->blocks[l].fcb,  &tensors->blocks[l].fcprojw,  &tensors->blocks[l].fcprojb};
      *slots[k] = p;
    }
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
