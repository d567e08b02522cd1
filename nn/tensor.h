// Tensors: an n-dimensional view (shape, strides, offset, dtype) of a
// storage that views share.
//
// A Tensor is a handle, like a shared_ptr: copying one copies the view, not
// the data, and the storage is freed when the last view of it goes. Views
// (view, slice, transpose, ...) never copy; contiguous(), to() and the
// factories allocate. Storage is 64-byte aligned and counted once, however
// many views it has, in MemoryTracker::global() under the category it was
// created with (memory.h).
//
// Shapes have up to kMaxDims dimensions of int64 sizes; strides are in
// elements, row-major for a new tensor (the last dimension's stride is 1).
// A tensor of rank 0 is a scalar: one element.
//
// Errors: fallible operations (the factories, contiguous, to, copy_from)
// return absl::Status. Misuse of a view operation or of data<T>() - a
// dimension out of range, a size that does not match, the wrong element
// type - is a programming error and aborts with a message naming the
// tensor's shape.
//
// Not thread-safe to mutate one Tensor object from several threads; distinct
// Tensor objects sharing storage may be used from different threads (the
// refcount is atomic; the elements are the caller's to synchronise).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/dtype.h"
#include "nn/memory.h"

namespace troupe::nn {

inline constexpr int kMaxDims = 8;

// Up to kMaxDims sizes. Constructing one with more aborts.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims)) {}
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int dim) const { return dims_[dim]; }
  int64_t& operator[](int dim) { return dims_[dim]; }
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  // The product of the sizes (1 for rank 0). REQUIRES: sizes >= 0.
  int64_t numel() const;
  std::string to_string() const;  // "[2, 3, 4]"

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::equal(a.dims().begin(), a.dims().end(), b.dims().begin(), b.dims().end());
  }

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

class Storage;  // tensor.cc

class Tensor {
 public:
  // An undefined tensor: no storage, rank 0; defined() is false.
  Tensor() = default;

  // A new contiguous tensor, uninitialised. InvalidArgument for a negative
  // size or more than 2^62 bytes; ResourceExhausted without the memory;
  // FailedPrecondition for kCuda without CUDA (build or device).
  [[nodiscard]] static absl::StatusOr<Tensor> empty(const Shape& shape, DType dtype,
                                                    MemoryCategory category,
                                                    Device device = Device::kCpu);
  // The same, set to zero.
  [[nodiscard]] static absl::StatusOr<Tensor> zeros(const Shape& shape, DType dtype,
                                                    MemoryCategory category,
                                                    Device device = Device::kCpu);
  // A new CPU tensor holding `values` (row-major), rounded to `dtype`.
  // InvalidArgument unless values.size() == shape.numel(); else as empty().
  [[nodiscard]] static absl::StatusOr<Tensor> from_data(std::span<const float> values,
                                                        const Shape& shape, MemoryCategory category,
                                                        DType dtype = DType::kFloat32);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  // Size and stride of dimension `dim`; a negative dim counts from the end.
  int64_t size(int dim) const;
  int64_t stride(int dim) const;
  std::span<const int64_t> strides() const {
    return {strides_.data(), static_cast<size_t>(shape_.rank())};
  }
  DType dtype() const { return dtype_; }
  size_t element_size() const { return nn::element_size(dtype_); }
  // The number of elements: 0 for an undefined tensor.
  int64_t numel() const { return defined() ? shape_.numel() : 0; }
  // Bytes of the elements this view covers: numel() * element_size().
  int64_t nbytes() const { return numel() * static_cast<int64_t>(element_size()); }
  // Offset of element [0, ..., 0] from the start of the storage, in elements.
  int64_t storage_offset() const { return offset_; }
  // REQUIRES (these three): defined().
  Device device() const;
  MemoryCategory category() const;
  bool shares_storage_with(const Tensor& other) const { return storage_ == other.storage_; }
  // E.g. "bfloat16[2, 3] cpu activations" (with the strides when not contiguous).
  std::string describe() const;

  // True if the elements lie row-major with no gaps (ignoring the strides
  // of size-1 dimensions); always true with fewer than two elements.
  bool is_contiguous() const;

  // Element [0, ..., 0], on device(); strides() apply to reach the others.
  // data<float>() requires kFloat32, data<uint16_t>() kBFloat16 or kFloat16
  // (the raw bits); otherwise, or on an undefined tensor, aborts. nullptr
  // for a tensor of no elements.
  template <class T>
  T* data() {
    check_access<T>();
    return static_cast<T*>(raw_data());
  }
  template <class T>
  const T* data() const {
    check_access<T>();
    return static_cast<const T*>(raw_data());
  }
  void* raw_data() const;

  // Views: no copy; the result shares this tensor's storage.
  //
  // The same elements in a new shape; one size may be -1 (inferred).
  // REQUIRES: is_contiguous() and the element counts match.
  Tensor view(const Shape& shape) const;
  // view(), under PyTorch's name. There is no copying reshape: call contiguous() first.
  Tensor reshape(const Shape& shape) const { return view(shape); }
  // Elements start, start + step, ... (len of them) of dimension dim.
  // REQUIRES: 0 <= start, len >= 0, step >= 1, start + (len - 1) * step < size(dim).
  Tensor slice(int dim, int64_t start, int64_t len, int64_t step = 1) const;
  // slice() with step 1, under PyTorch's name.
  Tensor narrow(int dim, int64_t start, int64_t len) const { return slice(dim, start, len); }
  // Index `index` of dimension dim, which is dropped (rank - 1).
  Tensor select(int dim, int64_t index) const;
  // Dimensions d0 and d1 swapped (their sizes and strides).
  Tensor transpose(int d0, int d1) const;
  // Dimension i of the result is dimension order[i] of this one.
  // REQUIRES: order is a permutation of [0, rank).
  Tensor permute(std::span<const int> order) const;
  Tensor permute(std::initializer_list<int> order) const {
    return permute(std::span<const int>(order));
  }

  // This tensor if is_contiguous(), else a contiguous copy (same dtype,
  // device and category). Errors as empty(); Unimplemented for a CUDA copy.
  [[nodiscard]] absl::StatusOr<Tensor> contiguous() const;
  // A contiguous copy with each element converted to `dtype` (dtype.h),
  // counted under `category` (by default this tensor's); this tensor itself
  // if it is contiguous and already of that dtype and category.
  // Unimplemented for a CUDA tensor that needs a copy.
  [[nodiscard]] absl::StatusOr<Tensor> to(DType dtype) const;
  [[nodiscard]] absl::StatusOr<Tensor> to(DType dtype, MemoryCategory category) const;
  // A contiguous copy on `device` (this tensor if it is there already).
  [[nodiscard]] absl::StatusOr<Tensor> to(Device device) const;

  // Copies src's elements into this tensor's, converting the dtype, for any
  // strides of either. InvalidArgument if the shapes differ. With a CUDA
  // tensor on either side both must be contiguous and of one dtype
  // (Unimplemented otherwise). REQUIRES: src's elements do not overlap this
  // tensor's (unless they are the same view).
  [[nodiscard]] absl::Status copy_from(const Tensor& src);

  // The elements as fp32, in row-major order of this view (copied from the
  // GPU if need be). Aborts on an undefined tensor or a failed CUDA copy.
  std::vector<float> to_vector() const;

 private:
  template <class T>
  void check_access() const {
    static_assert(std::is_same_v<std::remove_const_t<T>, float> ||
                      std::is_same_v<std::remove_const_t<T>, uint16_t>,
                  "Tensor::data<T>: T is float (kFloat32) or uint16_t (the 16-bit types)");
    constexpr bool is_float = std::is_same_v<std::remove_const_t<T>, float>;
    if (!defined() || (dtype_ == DType::kFloat32) != is_float) {
      fail_access(is_float ? "float" : "uint16_t");
    }
  }
  [[noreturn]] void fail_access(const char* type) const;
  int normalize_dim(int dim, const char* op) const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;
  Shape shape_;
  std::array<int64_t, kMaxDims> strides_{};
  DType dtype_ = DType::kFloat32;
};

}  // namespace troupe::nn
