// The CUDA backend (nn/device_backend.h): libtroupe_nn_cuda's one export. Each device has a
// stream of its own, created on first use, on which every call for that device is queued; calls
// that hand a value or host memory back wait for it.
#include <cuda_runtime_api.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nn/cuda/context.h"
#include "nn/cuda/detail/check.h"
#include "nn/cuda/gpt.h"
#include "nn/cuda/llama.h"
#include "nn/cuda/optim.h"
#include "nn/cuda/self_test.h"
#include "nn/device_backend.h"

namespace troupe::nn::cuda {
namespace {

using detail::cuda_status;

constexpr int kMaxDevices = 64;

// What the backend keeps per device: its stream and the reductions' scratch.
struct DeviceState {
  cudaStream_t stream = nullptr;
  ReductionScratch scratch;
  std::mutex reduction_mu;  // one reduction at a time uses the scratch
};

class CudaBackend final : public DeviceBackend {
 public:
  DeviceKind kind() const override { return DeviceKind::kCuda; }

  int device_count() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: not an error of later calls
      return 0;
    }
    return n < kMaxDevices ? n : kMaxDevices;
  }

  std::string describe(int index) override {
    cudaDeviceProp props;
    if (cudaGetDeviceProperties(&props, index) != cudaSuccess) {
      (void)cudaGetLastError();
      return absl::StrCat("cuda:", index);
    }
    return absl::StrFormat("cuda:%d %s (%.1f GiB)", index, props.name,
                           static_cast<double>(props.totalGlobalMem) / (1 << 30));
  }

  absl::Status self_test(int index) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return cuda::self_test((*d)->stream);
  }

  absl::StatusOr<void*> allocate(int index, int64_t bytes) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    void* data = nullptr;
    const cudaError_t code = cudaMalloc(&data, static_cast<size_t>(bytes));
    if (code == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", bytes, " bytes on cuda:", index, ": out of device memory"));
    }
    if (absl::Status s = cuda_status(code, "cudaMalloc"); !s.ok()) return s;
    return data;
  }

  void deallocate(int index, void* data) override {
    if (cudaSetDevice(index) == cudaSuccess) (void)cudaFree(data);
  }

  absl::Status copy(void* dst, Device dst_device, const void* src, Device src_device,
                    int64_t bytes) override {
    if (bytes <= 0) return absl::OkStatus();
    cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
    if (src_device.is_cpu()) kind = cudaMemcpyHostToDevice;
    if (dst_device.is_cpu()) kind = cudaMemcpyDeviceToHost;
    const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    if (absl::Status s =
            cuda_status(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, (*d)->stream),
                        "cudaMemcpyAsync");
        !s.ok()) {
      return s;
    }
    return cuda_status(cudaStreamSynchronize((*d)->stream), "copy");
  }

  absl::Status zero(int index, void* data, int64_t bytes) override {
    if (bytes <= 0) return absl::OkStatus();
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return cuda_status(cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), (*d)->stream),
                       "cudaMemsetAsync");
  }

  absl::Status synchronize(int index) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return cuda_status(cudaStreamSynchronize((*d)->stream), "synchronize");
  }

  absl::Status adamw_update(int index, const AdamWStep& s) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    const AdamWCoefficients k = adamw_coefficients(s.config, s.lr, s.step);
    // The ranges without weight decay, as the CPU's adamw_update walks them.
    size_t done = 0;
    auto run = [&](size_t begin, size_t end, float decay) {
      return cuda::adamw_update(s.params + begin, s.grads + begin, s.m + begin, s.v + begin,
                                end - begin, k, decay, (*d)->stream);
    };
    for (const ParamRange& r : s.no_decay) {
      if (absl::Status st = run(done, r.begin, k.decay); !st.ok()) return st;
      if (absl::Status st = run(r.begin, r.end, 1.0f); !st.ok()) return st;
      done = r.end;
    }
    return run(done, s.n, k.decay);
  }

  absl::Status sgd_update(int index, const SgdStep& s) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    const float one_minus_dampening =
        static_cast<float>(1.0 - static_cast<double>(s.config.dampening));
    return cuda::sgd_update(s.params, s.grads, s.momentum_buffer, s.n, s.config.weight_decay,
                            s.config.momentum, one_minus_dampening, s.config.nesterov, s.step == 1,
                            -s.lr, (*d)->stream);
  }

  absl::StatusOr<double> grad_norm_squared(int index, const float* g, size_t n) override {
    return reduce(index, g, n, &sum_of_squares);
  }

  absl::Status scale(int index, float* g, size_t n, float coef) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return cuda::scale(g, n, coef, (*d)->stream);
  }

  absl::Status add(int index, float* dst, const float* src, size_t n) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return cuda::add(dst, src, n, (*d)->stream);
  }

  absl::Status round_to(int index, float* out, const float* in, size_t n, DType type) override {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    if (type == DType::kFloat32) {
      if (out == in) return absl::OkStatus();
      return cuda_status(
          cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, (*d)->stream),
          "cudaMemcpyAsync");
    }
    return cuda::round_to(out, in, n, type == DType::kBFloat16, (*d)->stream);
  }

  absl::StatusOr<std::unique_ptr<Model>> create_model(int index, const ModelConfig& config,
                                                      const ModelOptions& options,
                                                      const ModelStorage& storage,
                                                      const TensorSlice& slice) override {
    if (const GPTConfig* g = config.gpt2()) return create_gpt(index, *g, options, storage, slice);
    return create_llama(index, *config.llama(), options, storage, slice);
  }

  // The stream of device `index`, made current (context.h).
  absl::StatusOr<cudaStream_t> stream(int index) {
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    return (*d)->stream;
  }

  absl::StatusOr<bool> has_inf_or_nan(int index, const float* g, size_t n) override {
    absl::StatusOr<double> found = reduce(index, g, n, &any_inf_or_nan);
    if (!found.ok()) return found.status();
    return *found != 0;
  }

 private:
  // Device `index` made current on this thread, its state created on first use.
  absl::StatusOr<DeviceState*> state(int index) {
    if (index < 0 || index >= kMaxDevices) {
      return absl::InvalidArgumentError(absl::StrCat("cuda:", index, ": no such device"));
    }
    if (absl::Status s = cuda_status(cudaSetDevice(index), "cudaSetDevice"); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat("cuda:", index, ": ", s.message()));
    }
    std::lock_guard<std::mutex> lock(mu_);
    std::unique_ptr<DeviceState>& d = devices_[static_cast<size_t>(index)];
    if (d != nullptr) return d.get();
    auto fresh = std::make_unique<DeviceState>();
    // A blocking stream: work on the legacy default stream (a collective's staging copy, the
    // event an NCCL operation waits for) is ordered after the kernels queued here.
    if (absl::Status s = cuda_status(cudaStreamCreateWithFlags(&fresh->stream, cudaStreamDefault),
                                     "cudaStreamCreate");
        !s.ok()) {
      return s;
    }
    void* scratch = nullptr;
    if (absl::Status s = cuda_status(cudaMalloc(&scratch, (kReductionBlocks + 1) * sizeof(double)),
                                     "cudaMalloc (reduction scratch)");
        !s.ok()) {
      (void)cudaStreamDestroy(fresh->stream);
      return s;
    }
    fresh->scratch.partials = static_cast<double*>(scratch);
    fresh->scratch.result = fresh->scratch.partials + kReductionBlocks;
    d = std::move(fresh);
    return d.get();
  }

  using Reduction = absl::Status (*)(const float*, size_t, ReductionScratch, cudaStream_t);

  // Runs `reduction` over g[0, n) and returns its result, waiting for it.
  absl::StatusOr<double> reduce(int index, const float* g, size_t n, Reduction reduction) {
    if (n == 0) return 0.0;
    absl::StatusOr<DeviceState*> d = state(index);
    if (!d.ok()) return d.status();
    std::lock_guard<std::mutex> lock((*d)->reduction_mu);
    if (absl::Status s = reduction(g, n, (*d)->scratch, (*d)->stream); !s.ok()) return s;
    double result = 0;
    if (absl::Status s = cuda_status(cudaMemcpyAsync(&result, (*d)->scratch.result, sizeof(double),
                                                     cudaMemcpyDeviceToHost, (*d)->stream),
                                     "cudaMemcpyAsync (reduction)");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = cuda_status(cudaStreamSynchronize((*d)->stream), "reduction"); !s.ok()) {
      return s;
    }
    return result;
  }

  std::mutex mu_;
  std::array<std::unique_ptr<DeviceState>, kMaxDevices> devices_;
};

CudaBackend* the_backend() {
  // Never destroyed: the process may use it until exit, and CUDA tears itself down then.
  static auto* backend = new CudaBackend();
  return backend;
}

}  // namespace

absl::StatusOr<cudaStream_t> device_stream(int index) {
  return the_backend()->stream(index);
}

}  // namespace troupe::nn::cuda

extern "C" troupe::nn::DeviceBackend* troupe_nn_cuda_backend() {
  return troupe::nn::cuda::the_backend();
}
