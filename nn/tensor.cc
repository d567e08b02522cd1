#include "nn/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nn/kernels.h"

namespace troupe::nn {

// One allocation, shared by every view of it; returned when the last goes.
class Storage {
 public:
  Storage(void* data, int64_t bytes, Device device, MemoryCategory category)
      : data_(data), bytes_(bytes), device_(device), category_(category) {}
  ~Storage() { deallocate(device_, category_, data_, bytes_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_;
  int64_t bytes_;
  Device device_;
  MemoryCategory category_;
};

namespace {

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "troupe::nn: %s\n", message.c_str());
  std::abort();
}

std::array<int64_t, kMaxDims> row_major_strides(const Shape& shape) {
  std::array<int64_t, kMaxDims> strides{};
  int64_t stride = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= std::max<int64_t>(shape[d], 1);
  }
  return strides;
}

// Where to find a tensor's elements: the address of element [0, ..., 0], its
// dtype, its strides (elements).
struct Layout {
  char* base;
  DType dtype;
  std::span<const int64_t> strides;
};

// One row of `n` elements: strided element by element, contiguous in bulk
// (in parallel, through kernels.h).
void copy_row(const Layout& src, int64_t src_offset, const Layout& dst, int64_t dst_offset,
              int64_t n, int64_t src_stride, int64_t dst_stride) {
  const size_t src_size = element_size(src.dtype);
  const size_t dst_size = element_size(dst.dtype);
  const char* from = src.base + src_offset * static_cast<int64_t>(src_size);
  char* to = dst.base + dst_offset * static_cast<int64_t>(dst_size);
  if (src_stride == 1 && dst_stride == 1) {
    if (src.dtype == dst.dtype) {
      std::memcpy(to, from, static_cast<size_t>(n) * src_size);
    } else if (src.dtype == DType::kFloat32) {
      from_float(reinterpret_cast<uint16_t*>(to), dst.dtype, reinterpret_cast<const float*>(from),
                 n);
    } else if (dst.dtype == DType::kFloat32) {
      to_float(reinterpret_cast<float*>(to), reinterpret_cast<const uint16_t*>(from), src.dtype, n);
    } else {
      convert(from, src.dtype, to, dst.dtype, n);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    convert(from + i * src_stride * static_cast<int64_t>(src_size), src.dtype,
            to + i * dst_stride * static_cast<int64_t>(dst_size), dst.dtype, 1);
  }
}

// Copies every element of `shape` from src to dst, in row-major order of the
// index; a run of dimensions contiguous in both is copied as one row.
void copy_elements(const Shape& shape, const Layout& src, const Layout& dst) {
  const int rank = shape.rank();
  if (shape.numel() == 0) return;
  if (rank == 0) return copy_row(src, 0, dst, 0, 1, 1, 1);
  // Merge trailing dimensions while both sides are contiguous across them.
  int inner_dims = 1;
  int64_t inner = shape[rank - 1];
  while (inner_dims < rank && src.strides[rank - 1] == 1 && dst.strides[rank - 1] == 1) {
    const int d = rank - 1 - inner_dims;
    if (src.strides[d] != inner || dst.strides[d] != inner) break;
    inner *= shape[d];
    ++inner_dims;
  }
  const int outer_rank = rank - inner_dims;
  std::array<int64_t, kMaxDims> index{};
  const int64_t rows = shape.numel() / inner;
  for (int64_t row = 0; row < rows; ++row) {
    int64_t src_offset = 0, dst_offset = 0;
    for (int d = 0; d < outer_rank; ++d) {
      src_offset += index[d] * src.strides[d];
      dst_offset += index[d] * dst.strides[d];
    }
    copy_row(src, src_offset, dst, dst_offset, inner, src.strides[rank - 1], dst.strides[rank - 1]);
    for (int d = outer_rank - 1; d >= 0; --d) {  // next index, last dimension fastest
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

Layout layout_of(const Tensor& t) {
  return {static_cast<char*>(t.raw_data()), t.dtype(), t.strides()};
}

}  // namespace

Shape::Shape(std::span<const int64_t> dims) : rank_(static_cast<int>(dims.size())) {
  if (dims.size() > kMaxDims) {
    fail(absl::StrCat("Shape [", absl::StrJoin(dims, ", "), "] has ", dims.size(),
                      " dimensions; at most ", kMaxDims, " are supported"));
  }
  std::copy(dims.begin(), dims.end(), dims_.begin());
}

int64_t Shape::numel() const {
  return std::accumulate(dims().begin(), dims().end(), int64_t{1}, std::multiplies<>());
}

std::string Shape::to_string() const {
  return absl::StrCat("[", absl::StrJoin(dims(), ", "), "]");
}

absl::StatusOr<Tensor> Tensor::empty(const Shape& shape, DType dtype, MemoryCategory category,
                                     Device device) {
  int64_t bytes = static_cast<int64_t>(nn::element_size(dtype));
  for (int64_t size : shape.dims()) {
    if (size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot create a ", nn::to_string(dtype),
                                                     shape.to_string(), " tensor: negative size"));
    }
  }
  for (int64_t size : shape.dims()) {
    if (__builtin_mul_overflow(bytes, size, &bytes) || bytes > (int64_t{1} << 62)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot create a ", nn::to_string(dtype),
                                                     shape.to_string(),
                                                     " tensor: more than 2^62 bytes"));
    }
  }
  absl::StatusOr<void*> data = allocate(device, category, bytes);
  if (!data.ok()) {
    return absl::Status(data.status().code(),
                        absl::StrCat("cannot create a ", nn::to_string(dtype), shape.to_string(),
                                     " tensor: ", data.status().message()));
  }
  Tensor t;
  t.storage_ = std::make_shared<Storage>(*data, bytes, device, category);
  t.shape_ = shape;
  t.strides_ = row_major_strides(shape);
  t.dtype_ = dtype;
  return t;
}

absl::StatusOr<Tensor> Tensor::zeros(const Shape& shape, DType dtype, MemoryCategory category,
                                     Device device) {
  absl::StatusOr<Tensor> t = empty(shape, dtype, category, device);
  if (!t.ok()) return t;
  if (absl::Status s = zero_bytes(t->raw_data(), device, t->nbytes()); !s.ok()) return s;
  return t;
}

absl::StatusOr<Tensor> Tensor::from_data(std::span<const float> values, const Shape& shape,
                                         MemoryCategory category, DType dtype) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    return absl::InvalidArgumentError(
        absl::StrCat("from_data: ", values.size(), " values for a tensor of shape ",
                     shape.to_string(), " (", shape.numel(), " elements)"));
  }
  absl::StatusOr<Tensor> t = empty(shape, dtype, category);
  if (!t.ok()) return t;
  convert(values.data(), DType::kFloat32, t->raw_data(), dtype, shape.numel());
  return t;
}

int Tensor::normalize_dim(int dim, const char* op) const {
  const int rank = shape_.rank();
  if (!defined() || dim < -rank || dim >= rank) {
    fail(absl::StrCat("Tensor::", op, ": dimension ", dim, " out of range for ", describe()));
  }
  return dim < 0 ? dim + rank : dim;
}

int64_t Tensor::size(int dim) const {
  return shape_[normalize_dim(dim, "size")];
}

int64_t Tensor::stride(int dim) const {
  return strides_[normalize_dim(dim, "stride")];
}

Device Tensor::device() const {
  if (!defined()) fail("Tensor::device() of an undefined tensor");
  return storage_->device();
}

MemoryCategory Tensor::category() const {
  if (!defined()) fail("Tensor::category() of an undefined tensor");
  return storage_->category();
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  std::string out = absl::StrCat(nn::to_string(dtype_), shape_.to_string(), " ",
                                 nn::to_string(device()), " ", nn::to_string(category()));
  if (!is_contiguous()) absl::StrAppend(&out, " strides [", absl::StrJoin(strides(), ", "), "]");
  return out;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = shape_.rank() - 1; d >= 0; --d) {
    if (shape_[d] == 0) return true;
    if (shape_[d] != 1 && strides_[d] != expected) return false;
    expected *= shape_[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (!defined() || storage_->data() == nullptr) return nullptr;
  return static_cast<char*>(storage_->data()) +
         offset_ * static_cast<int64_t>(nn::element_size(dtype_));
}

void Tensor::fail_access(const char* type) const {
  fail(absl::StrCat("Tensor::data<", type, ">() on ", describe(),
                    defined() ? " (float is for float32, uint16_t for bfloat16 and float16)" : ""));
}

Tensor Tensor::view(const Shape& shape) const {
  Shape resolved = shape;
  int inferred = -1;
  int64_t known = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (shape[d] == -1 && inferred == -1) {
      inferred = d;
    } else {
      if (shape[d] < 0) fail(absl::StrCat("Tensor::view", shape.to_string(), " of ", describe()));
      known *= shape[d];
    }
  }
  if (inferred >= 0 && known > 0) resolved[inferred] = numel() / known;
  if (!defined() || resolved.numel() != numel() || (inferred >= 0 && known == 0)) {
    fail(absl::StrCat("Tensor::view", shape.to_string(), " of ", describe(), ": ", numel(),
                      " elements do not fit"));
  }
  if (!is_contiguous()) {
    fail(absl::StrCat("Tensor::view", shape.to_string(), " of ", describe(),
                      ": not contiguous (call contiguous() first)"));
  }
  Tensor t = *this;
  t.shape_ = resolved;
  t.strides_ = row_major_strides(resolved);
  return t;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t len, int64_t step) const {
  const int d = normalize_dim(dim, "slice");
  if (start < 0 || len < 0 || step < 1 || (len > 0 && start + (len - 1) * step >= shape_[d]) ||
      start > shape_[d]) {
    fail(absl::StrCat("Tensor::slice(dim ", dim, ", start ", start, ", len ", len, ", step ", step,
                      ") out of range for ", describe()));
  }
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = len;
  t.strides_[d] *= step;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = normalize_dim(dim, "select");
  if (index < 0 || index >= shape_[d]) {
    fail(absl::StrCat("Tensor::select(dim ", dim, ", index ", index, ") out of range for ",
                      describe()));
  }
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  std::array<int64_t, kMaxDims> sizes{};
  int rank = 0;
  for (int i = 0; i < shape_.rank(); ++i) {
    if (i == d) continue;
    sizes[rank] = shape_[i];
    t.strides_[rank] = strides_[i];
    ++rank;
  }
  t.shape_ = Shape(std::span<const int64_t>(sizes.data(), rank));
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  const int a = normalize_dim(d0, "transpose");
  const int b = normalize_dim(d1, "transpose");
  Tensor t = *this;
  std::swap(t.shape_[a], t.shape_[b]);
  std::swap(t.strides_[a], t.strides_[b]);
  return t;
}

Tensor Tensor::permute(std::span<const int> order) const {
  std::array<bool, kMaxDims> seen{};
  bool valid = defined() && static_cast<int>(order.size()) == shape_.rank();
  for (size_t i = 0; valid && i < order.size(); ++i) {
    valid = order[i] >= 0 && order[i] < shape_.rank() && !seen[order[i]];
    if (valid) seen[order[i]] = true;
  }
  if (!valid) {
    fail(absl::StrCat("Tensor::permute(", absl::StrJoin(order, ", "), ") of ", describe(),
                      ": not a permutation of the dimensions"));
  }
  Tensor t = *this;
  for (size_t i = 0; i < order.size(); ++i) {
    t.shape_[static_cast<int>(i)] = shape_[order[i]];
    t.strides_[i] = strides_[order[i]];
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::contiguous() const {
  if (!defined() || is_contiguous()) return *this;
  return to(dtype_, category());
}

absl::StatusOr<Tensor> Tensor::to(DType dtype) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::to of an undefined tensor");
  return to(dtype, category());
}

absl::StatusOr<Tensor> Tensor::to(DType dtype, MemoryCategory category) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::to of an undefined tensor");
  if (dtype == dtype_ && category == this->category() && is_contiguous()) return *this;
  if (device() != Device::kCpu) {
    return absl::UnimplementedError(absl::StrCat("Tensor::to(", nn::to_string(dtype), ") of ",
                                                 describe(), ": conversions run on the CPU only"));
  }
  absl::StatusOr<Tensor> t = empty(shape_, dtype, category);
  if (!t.ok()) return t;
  copy_elements(shape_, layout_of(*this), layout_of(*t));
  return t;
}

absl::StatusOr<Tensor> Tensor::to(Device device) const {
  if (!defined()) return absl::FailedPreconditionError("Tensor::to of an undefined tensor");
  if (device == this->device()) return *this;
  if (!is_contiguous() && this->device() != Device::kCpu) {
    return absl::UnimplementedError(absl::StrCat("Tensor::to(", nn::to_string(device), ") of ",
                                                 describe(), ": not contiguous"));
  }
  absl::StatusOr<Tensor> src = contiguous();
  if (!src.ok()) return src;
  absl::StatusOr<Tensor> t = empty(shape_, dtype_, category(), device);
  if (!t.ok()) return t;
  if (absl::Status s = copy_bytes(t->raw_data(), device, src->raw_data(), src->device(), nbytes());
      !s.ok()) {
    return s;
  }
  return t;
}

absl::Status Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Tensor::copy_from: ", describe(), " <- ", src.describe()));
  }
  if (!(shape_ == src.shape_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Tensor::copy_from: shapes differ: ", describe(), " <- ", src.describe()));
  }
  if (storage_ == src.storage_ && offset_ == src.offset_ && strides_ == src.strides_ &&
      dtype_ == src.dtype_) {
    return absl::OkStatus();
  }
  if (device() == Device::kCpu && src.device() == Device::kCpu) {
    copy_elements(shape_, layout_of(src), layout_of(*this));
    return absl::OkStatus();
  }
  if (dtype_ != src.dtype_ || !is_contiguous() || !src.is_contiguous()) {
    return absl::UnimplementedError(
        absl::StrCat("Tensor::copy_from: ", describe(), " <- ", src.describe(),
                     ": with a CUDA tensor both must be contiguous and of one dtype"));
  }
  return copy_bytes(raw_data(), device(), src.raw_data(), src.device(), nbytes());
}

std::vector<float> Tensor::to_vector() const {
  if (!defined()) fail("Tensor::to_vector() of an undefined tensor");
  std::vector<float> out(static_cast<size_t>(numel()));
  const auto out_strides = row_major_strides(shape_);
  const Layout dst{reinterpret_cast<char*>(out.data()), DType::kFloat32,
                   std::span<const int64_t>(out_strides.data(), static_cast<size_t>(rank()))};
  if (device() == Device::kCpu) {
    copy_elements(shape_, layout_of(*this), dst);
    return out;
  }
  absl::StatusOr<Tensor> host = to(Device::kCpu);
  if (!host.ok())
    fail(absl::StrCat("Tensor::to_vector() of ", describe(), ": ", host.status().ToString()));
  copy_elements(shape_, layout_of(*host), dst);
  return out;
}

}  // namespace troupe::nn
