#include "nn/device_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "nn/memory.h"
#include "nn/optim/clip.h"
#include "nn/optim/loss_scaler.h"

namespace troupe::nn {
namespace {

// The CPU: host memory and nn/optim's kernels, on the calling thread.
class CpuBackend final : public DeviceBackend {
 public:
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int device_count() override { return 1; }
  std::string describe(int) override { return "cpu"; }
  absl::Status self_test(int) override { return absl::OkStatus(); }

  absl::StatusOr<void*> allocate(int, int64_t bytes) override {
    const int64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", format_bytes(rounded), " on the cpu: out of memory"));
    }
    return data;
  }
  void deallocate(int, void* data) override { std::free(data); }
  absl::Status copy(void* dst, Device, const void* src, Device, int64_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status zero(int, void* data, int64_t bytes) override {
    if (bytes > 0) std::memset(data, 0, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status synchronize(int) override { return absl::OkStatus(); }

  absl::Status adamw_update(int, const AdamWStep& s) override {
    nn::adamw_update(s.params, s.grads, s.m, s.v, s.n, s.config, s.lr, s.step, s.no_decay);
    return absl::OkStatus();
  }
  absl::Status sgd_update(int, const SgdStep& s) override {
    nn::sgd_update(s.params, s.grads, s.momentum_buffer, s.n, s.config, s.lr, s.step);
    return absl::OkStatus();
  }
  absl::StatusOr<double> grad_norm_squared(int, const float* g, size_t n) override {
    return nn::grad_norm_squared(g, n);
  }
  absl::Status scale(int, float* g, size_t n, float coef) override {
    scale_grads(g, n, coef);
    return absl::OkStatus();
  }
  absl::Status add(int, float* dst, const float* src, size_t n) override {
    for (size_t i = 0; i < n; ++i)
      dst[i] += src[i];
    return absl::OkStatus();
  }
  absl::StatusOr<bool> has_inf_or_nan(int, const float* g, size_t n) override {
    return nn::has_inf_or_nan(g, n);
  }
  absl::StatusOr<std::unique_ptr<Model>> create_model(int, const ModelConfig& config,
                                                      const ModelOptions& options,
                                                      const ModelStorage& storage,
                                                      const TensorSlice& slice) override {
    return detail::create_cpu_model(config, options, storage, slice);
  }
  absl::Status round_to(int, float* out, const float* in, size_t n, DType type) override {
    if (type == DType::kFloat32) {  // nothing to round
      if (out != in && n > 0) std::memmove(out, in, n * sizeof(float));
      return absl::OkStatus();
    }
    constexpr size_t kChunk = 4096;
    uint16_t rounded[kChunk];
    for (size_t at = 0; at < n; at += kChunk) {
      const auto len = static_cast<int64_t>(std::min(kChunk, n - at));
      convert(in + at, DType::kFloat32, rounded, type, len);
      convert(rounded, type, out + at, DType::kFloat32, len);
    }
    return absl::OkStatus();
  }
};

// The folder of the library this function is in (libtroupe_nn), with a trailing '/', or "".
std::string own_folder() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<const void*>(&own_folder), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

struct LoadedCuda {
  absl::Status status;
  DeviceBackend* backend = nullptr;
};

LoadedCuda load_cuda() {
#ifndef TROUPE_HAVE_CUDA
  return {absl::FailedPreconditionError("this build of troupe has no CUDA support"), nullptr};
#else
  // Beside libtroupe_nn first (the build tree and an install keep them together), then the
  // loader's search path.
  constexpr const char* kName = "libtroupe_nn_cuda.so";
  const std::string beside = own_folder() + kName;
  void* library = ::dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why_beside;
  if (library == nullptr) {
    const char* why = ::dlerror();
    why_beside = why != nullptr ? why : "not found";
    library = ::dlopen(kName, RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    const char* why = ::dlerror();
    return {absl::FailedPreconditionError(absl::StrCat(
                "cannot load the CUDA backend ", kName, ": ", why_beside, "; ",
                why != nullptr ? why : "not found",
                " (it needs the CUDA runtime: put the CUDA toolkit's library folder on "
                "LD_LIBRARY_PATH)")),
            nullptr};
  }
  auto entry = reinterpret_cast<DeviceBackend* (*)()>(::dlsym(library, "troupe_nn_cuda_backend"));
  if (entry == nullptr) {
    return {absl::FailedPreconditionError(
                absl::StrCat(kName, " has no troupe_nn_cuda_backend: a library of another build")),
            nullptr};
  }
  return {absl::OkStatus(), entry()};  // the library stays loaded for the life of the process
#endif
}

std::once_flag g_cuda_once;
std::atomic<const LoadedCuda*> g_cuda{nullptr};  // never destroyed once set

const LoadedCuda& cuda() {
  std::call_once(g_cuda_once, [] { g_cuda.store(new LoadedCuda(load_cuda())); });
  return *g_cuda.load();
}

}  // namespace

DeviceBackend& cpu_backend() {
  static CpuBackend* cpu = new CpuBackend();  // never destroyed: used until exit
  return *cpu;
}

absl::StatusOr<DeviceBackend*> backend(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return &cpu_backend();
  const LoadedCuda& loaded = cuda();
  if (!loaded.status.ok()) return loaded.status;
  return loaded.backend;
}

bool cuda_backend_loaded() {
  const LoadedCuda* loaded = g_cuda.load();
  return loaded != nullptr && loaded->backend != nullptr;
}

absl::Status check_device(Device device) {
  if (device.index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(to_string(device), ": negative index"));
  }
  if (device.is_cpu()) {
    if (device.index != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu:", device.index, ": the CPU is one device, cpu (index 0)"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceBackend*> b = backend(device.kind);
  if (!b.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(to_string(device), " asked for: ", b.status().message()));
  }
  const int n = (*b)->device_count();
  if (n == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(to_string(device), " asked for, and this machine has no usable CUDA device"));
  }
  if (device.index >= n) {
    return absl::FailedPreconditionError(absl::StrCat(to_string(device), " asked for, ", n,
                                                      " CUDA device", n == 1 ? "" : "s", " here"));
  }
  return absl::OkStatus();
}

}  // namespace troupe::nn
