#include "nn/model/layout.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace troupe::nn {

ModelLayout::ModelLayout(const TensorSlice& slice, int num_layers, std::vector<ParamTensor> tensors,
                         const Blocks& blocks, bool tied_head)
    : slice_(slice), num_layers_(num_layers), tensors_(std::move(tensors)), tied_head_(tied_head) {
  num_params_ = tensors_.back().offset + tensors_.back().size;
  const auto L = static_cast<size_t>(num_layers);
  auto tensor_offset = [&](size_t index) { return tensors_[index].offset; };
  auto block_tensor = [&](size_t l, size_t k) {
    return tensor_offset(blocks.first_tensor + l * blocks.tensors_per_block + k);
  };
  const size_t head_tensor = blocks.first_tensor + L * blocks.tensors_per_block;
  segments_.push_back({SegmentRole::kEmbedding, -1, {0, tensor_offset(blocks.first_tensor)}});
  for (size_t l = 0; l < L; ++l) {
    const size_t end = l + 1 < L ? block_tensor(l + 1, 0) : tensor_offset(head_tensor);
    segments_.push_back({SegmentRole::kBlock, static_cast<int>(l), {block_tensor(l, 0), end}});
  }
  segments_.push_back({SegmentRole::kHead, -1, {tensor_offset(head_tensor), num_params_}});
  backward_marks_.resize(L);
  for (size_t l = 0; l < L; ++l) {
    for (size_t k : blocks.backward_order)
      backward_marks_[l].push_back(block_tensor(l, k));
  }
  quiet_tail_ = block_tensor(0, blocks.quiet_tail);
}

int ModelLayout::find(const std::string& name) const {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (tensors_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::vector<ParamRange> ModelLayout::segment_ranges() const {
  std::vector<ParamRange> ranges;
  for (const Segment& s : segments_)
    ranges.push_back(s.range);
  return ranges;
}

std::vector<ParamRange> ModelLayout::no_decay_ranges() const {
  std::vector<ParamRange> ranges;
  for (const ParamTensor& t : tensors_) {
    if (t.decay) continue;
    if (!ranges.empty() && ranges.back().end == t.offset) {
      ranges.back().end += t.size;
    } else {
      ranges.push_back({t.offset, t.offset + t.size});
    }
  }
  return ranges;
}

absl::Status ModelLayout::check_range(size_t begin, size_t end) const {
  if (begin > end || end > num_params_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "range [", begin, ", ", end, ") is not within the ", num_params_, " parameters"));
  }
  for (const ParamTensor& t : tensors_) {
    const size_t t_end = t.offset + t.size;
    const bool inside = t.offset >= begin && t_end <= end;
    const bool outside = t_end <= begin || t.offset >= end;
    if (!inside && !outside) {
      return absl::InvalidArgumentError(absl::StrCat("range [", begin, ", ", end,
                                                     ") cuts through tensor ", t.name, " [",
                                                     t.offset, ", ", t_end, ")"));
    }
  }
  return absl::OkStatus();
}

void for_each_slice_run(const ModelLayout& whole, const ModelLayout& slice,
                        const std::function<void(size_t, size_t, size_t)>& copy) {
  const int tp = slice.slice().size;
  const auto rank = static_cast<size_t>(slice.slice().rank);
  if (tp == 1) {
    copy(0, 0, whole.num_params());
    return;
  }
  const std::vector<ParamTensor>& from = whole.tensors();
  const std::vector<ParamTensor>& to = slice.tensors();
  for (size_t i = 0; i < to.size(); ++i) {
    const ParamTensor& w = from[i];
    const ParamTensor& s = to[i];
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

void copy_to_slice(const ModelLayout& whole, const ModelLayout& slice, const float* whole_buffer,
                   float* slice_buffer) {
  for_each_slice_run(whole, slice, [&](size_t w, size_t s, size_t n) {
    std::copy(whole_buffer + w, whole_buffer + w + n, slice_buffer + s);
  });
}

void copy_from_slice(const ModelLayout& whole, const ModelLayout& slice, const float* slice_buffer,
                     float* whole_buffer) {
  for_each_slice_run(whole, slice, [&](size_t w, size_t s, size_t n) {
    std::copy(slice_buffer + s, slice_buffer + s + n, whole_buffer + w);
  });
}

}  // namespace troupe::nn
