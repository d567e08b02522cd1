// The device seam: what code above the model asks of a device, written once for every kind.
//
// A DeviceBackend is one kind of device (device.h): the CPU (built into troupe_nn: aligned host
// memory, memcpy, nn/optim's kernels) or CUDA (libtroupe_nn_cuda: cudaMalloc, cudaMemcpy, the
// kernels of nn/cuda/). A caller holds a Device and asks backend(device.kind) for the
// operations; no code outside nn/ includes a CUDA header or branches on the kind to compute.
//
//   absl::StatusOr<DeviceBackend*> b = backend(device.kind);   // loads CUDA's on first use
//   void* p = *(*b)->allocate(device.index, bytes);
//   (*b)->adamw_update(device.index, step);                   // the shard's optimizer step
//
// Semantics are the CPU's, stated in nn/optim/*.h: a CUDA backend computes the same elementwise
// arithmetic in the same order without fused multiply-adds (so an optimizer step gives the CPU's
// bits) and its reductions in a fixed order (so they repeat bitwise run after run on one GPU,
// equal to the CPU's within rounding).
//
// Ordering: every call on a device's buffers is ordered after the calls before it on that device
// (the CUDA backend queues them on the device's stream). A call that returns a value to the host
// (grad_norm_squared, has_inf_or_nan) or copies to or from host memory waits for the work before
// it; synchronize() waits for everything queued.
//
// Thread safety: a backend may be called from any thread; calls on one device from two threads
// at once are not ordered with each other (each actor holds its own device: docs/gpu.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/device.h"
#include "nn/dtype.h"
#include "nn/model/model.h"
#include "nn/optim/adamw.h"
#include "nn/optim/param_range.h"
#include "nn/optim/sgd.h"

namespace troupe::nn {

// One AdamW step over a slice of n parameters, its buffers on one device (nn/optim/adamw.h).
struct AdamWStep {
  float* params = nullptr;
  const float* grads = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  size_t n = 0;
  AdamWConfig config;
  float lr = 0.0f;
  int step = 1;
  std::span<const ParamRange> no_decay;  // host memory: ranges of [0, n) without weight decay
};

// One SGD step (nn/optim/sgd.h); momentum_buffer null when config.momentum == 0.
struct SgdStep {
  float* params = nullptr;
  const float* grads = nullptr;
  float* momentum_buffer = nullptr;
  size_t n = 0;
  SgdConfig config;
  float lr = 0.0f;
  int step = 1;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual DeviceKind kind() const = 0;
  // Devices of this kind usable in this process (the CPU: 1). 0 means none: every call below
  // then fails with FailedPrecondition.
  virtual int device_count() = 0;
  // "cpu", "cuda:0 NVIDIA H100 80GB HBM3 (79.1 GiB)".
  virtual std::string describe(int index) = 0;
  // Runs a small computation on device `index` and checks its result.
  virtual absl::Status self_test(int index) = 0;

  // --- Memory. `index` names the device of the kind; buffers are used only on it. ---

  // `bytes` (> 0) of uninitialised memory, 64-byte aligned. ResourceExhausted without it.
  virtual absl::StatusOr<void*> allocate(int index, int64_t bytes) = 0;
  virtual void deallocate(int index, void* data) = 0;
  // Copies `bytes` between `src` and `dst`, either of which may be host memory (a CPU device),
  // complete when it returns. REQUIRES: one of the two devices is of this kind; no overlap.
  virtual absl::Status copy(void* dst, Device dst_device, const void* src, Device src_device,
                            int64_t bytes) = 0;
  virtual absl::Status zero(int index, void* data, int64_t bytes) = 0;
  // Waits for the work queued on device `index`; its first asynchronous error, if any.
  virtual absl::Status synchronize(int index) = 0;

  // --- The optimizer's kernels, with the semantics of nn/optim. ---

  virtual absl::Status adamw_update(int index, const AdamWStep& step) = 0;
  virtual absl::Status sgd_update(int index, const SgdStep& step) = 0;
  // The sum of g[i]^2 over [0, n), accumulated in double (nn/optim/clip.h).
  virtual absl::StatusOr<double> grad_norm_squared(int index, const float* g, size_t n) = 0;
  // g[i] *= coef (clipping, averaging).
  virtual absl::Status scale(int index, float* g, size_t n, float coef) = 0;
  // dst[i] += src[i]: a reduced part or a received gradient joining what is there.
  virtual absl::Status add(int index, float* dst, const float* src, size_t n) = 0;
  // True if some g[i] is infinite or NaN (the fp16 loss scaler's overflow check).
  virtual absl::StatusOr<bool> has_inf_or_nan(int index, const float* g, size_t n) = 0;
  // out[i] = in[i] rounded to `type` (bf16 or fp16, to nearest even, as nn/dtype.h's convert)
  // and back to fp32: mixed precision's compute copy of the fp32 masters. out may be in.
  virtual absl::Status round_to(int index, float* out, const float* in, size_t n, DType type) = 0;

  // --- Models. ---

  // A model of `config` computing on device `index` (storage.device), with create_model's
  // contract (nn/model/model.h). FailedPrecondition for what the device cannot run (an
  // architecture or an option without kernels for it), saying what.
  virtual absl::StatusOr<std::unique_ptr<Model>> create_model(int index, const ModelConfig& config,
                                                              const ModelOptions& options,
                                                              const ModelStorage& storage,
                                                              const TensorSlice& slice) = 0;
};

// The backend of `kind`. The CPU's always; CUDA's is loaded on the first call that asks for it
// (libtroupe_nn_cuda, found beside libtroupe_nn), and FailedPrecondition says why when it cannot
// be: a build without CUDA, the library missing, or the CUDA runtime not loadable. Never null on
// OK; the backend lives as long as the process.
[[nodiscard]] absl::StatusOr<DeviceBackend*> backend(DeviceKind kind);

// The CPU's backend, which cannot fail.
DeviceBackend& cpu_backend();

// OK if `device` can be computed on here: the CPU, or a CUDA device whose index is below the
// CUDA backend's device_count(). FailedPrecondition saying why not (no CUDA in this build, no GPU,
// "cuda:3 asked for, 2 CUDA devices here").
[[nodiscard]] absl::Status check_device(Device device);

}  // namespace troupe::nn

// The CUDA backend's library exports this one C function; troupe_nn finds it with dlsym.
extern "C" troupe::nn::DeviceBackend* troupe_nn_cuda_backend();
