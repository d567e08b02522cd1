#include "nn/gpt_param_layout.h"

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

absl::Status GPTConfig::validate() const {
  auto positive = [](const char* field, int value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: ", field, " = ", value, " must be positive"));
  };
  for (absl::Status s : {positive("max_seq_len", max_seq_len), positive("vocab_size", vocab_size),
                         positive("num_layers", num_layers), positive("num_heads", num_heads),
                         positive("channels", channels)}) {
    if (!s.ok()) return s;
  }
  if (padded_vocab_size != 0 && padded_vocab_size < vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: padded_vocab_size = ", padded_vocab_size,
                     " < vocab_size = ", vocab_size, " (use 0 for no padding)"));
  }
  if (channels % num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPTConfig: channels = ", channels, " is not a multiple of num_heads = ", num_heads));
  }
  // The kernels index with int: the largest tensor, 4C x C or Vp x C, must fit.
  int64_t C = channels;
  if (4 * C * C > INT_MAX || int64_t{padded_vocab()} * C > INT_MAX ||
      int64_t{max_seq_len} * C > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPTConfig: channels = ", channels, " with vocabulary ", padded_vocab(),
                     " and max_seq_len ", max_seq_len, " make a tensor over INT_MAX elements"));
  }
  return absl::OkStatus();
}

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
  auto add = [this](std::string name, std::vector<int> shape, TensorSplit split) {
    size_t offset = num_params_;
    num_params_ += numel(shape);
    tensors_.push_back({std::move(name), offset, numel(shape), std::move(shape), split});
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
}

void for_each_slice_run(const GPTParamLayout& whole, const GPTParamLayout& slice,
                        const std::function<void(size_t, size_t, size_t)>& copy) {
  const int tp = slice.slice().size;
  const auto rank = static_cast<size_t>(slice.slice().rank);
  if (tp == 1) {
    copy(0, 0, whole.num_params());
    return;
  }
  const std::vector<GPTParamTensor>& from = whole.tensors();
  const std::vector<GPTParamTensor>& to = slice.tensors();
  for (size_t i = 0; i < to.size(); ++i) {
    const GPTParamTensor& w = from[i];
    const GPTParamTensor& s = to[i];
    switch (s.split) {
      case TensorSplit::kReplicated:
        copy(w.offset, s.offset, s.size);
        break;
      case TensorSplit::kRows:  // the rank's s.size floats are one run
        copy(w.offset + rank * s.size, s.offset, s.size);
        break;
      case TensorSplit::kQkvRows: {  // a third of the slice from each of q, k, v
        const size_t part = s.size / 3;
        for (size_t k = 0; k < 3; ++k)
          copy(w.offset + k * (w.size / 3) + rank * part, s.offset + k * part, part);
        break;
      }
      case TensorSplit::kColumns: {  // each row's columns of the rank
        const auto rows = static_cast<size_t>(s.shape[0]);
        const auto cols = static_cast<size_t>(s.shape[1]);
        const size_t whole_cols = cols * static_cast<size_t>(tp);
        for (size_t r = 0; r < rows; ++r)
          copy(w.offset + r * whole_cols + rank * cols, s.offset + r * cols, cols);
        break;
      }
    }
  }
}

void copy_to_slice(const GPTParamLayout& whole, const GPTParamLayout& slice,
                   const float* whole_buffer, float* slice_buffer) {
  for_each_slice_run(whole, slice, [&](size_t w, size_t s, size_t n) {
    std::copy(whole_buffer + w, whole_buffer + w + n, slice_buffer + s);
  });
}

void copy_from_slice(const GPTParamLayout& whole, const GPTParamLayout& slice,
                     const float* slice_buffer, float* whole_buffer) {
  for_each_slice_run(whole, slice, [&](size_t w, size_t s, size_t n) {
    std::copy(slice_buffer + s, slice_buffer + s + n, whole_buffer + w);
  });
}

std::vector<ParamRange> GPTParamLayout::segments() const {
  std::vector<ParamRange> segments;
  segments.push_back({0, block_begin(0)});
  for (int l = 0; l < num_layers_; ++l)
    segments.push_back({block_begin(l), block_begin(l + 1)});
  segments.push_back({block_begin(num_layers_), num_params_});
  return segments;
}

std::vector<ParamRange> GPTParamLayout::no_decay_ranges() const {
  std::vector<ParamRange> ranges;
  for (const GPTParamTensor& t : tensors_) {
    if (t.shape.size() != 1) continue;
    if (!ranges.empty() && ranges.back().end == t.offset) {
      ranges.back().end += t.size;
    } else {
      ranges.push_back({t.offset, t.offset + t.size});
    }
  }
  return ranges;
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
  const std::vector<GPTParamTensor>& all = layout.tensors();
  for (const GPTParamTensor& t : all) {
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
    const GPTParamTensor& t = all[i];
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
