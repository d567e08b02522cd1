// Compute devices: which one a model, a buffer or a kernel is on, and what this build and machine
// offer. The names are PyTorch's: "cpu", "cuda", "cuda:1".
//
// The CPU is always there. CUDA devices are reached through the CUDA backend (device_backend.h),
// a library of its own (libtroupe_nn_cuda) that is loaded the first time something asks for a
// CUDA device, so that a process that only ever computes on the CPU maps neither the CUDA
// runtime nor cuBLAS. Nothing in this header loads it except where a function says so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace troupe::nn {

enum class DeviceKind : uint8_t { kCpu, kCuda };
inline constexpr int kNumDeviceKinds = 2;
const char* to_string(DeviceKind kind);  // "cpu", "cuda"

// One device: its kind and, for CUDA, its ordinal as the CUDA runtime numbers it in this process
// (after CUDA_VISIBLE_DEVICES). The CPU is one device, index 0.
struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }

  friend bool operator==(const Device&, const Device&) = default;
};

// "cpu", "cuda:0".
std::string to_string(Device device);

// "cpu", "cuda" (device 0) or "cuda:N"; InvalidArgument naming the text otherwise. Does not check
// that the device exists (see cuda_device_count).
[[nodiscard]] absl::StatusOr<Device> parse_device(std::string_view text);

// True if this build includes the CUDA backend (compiled with the CUDA toolkit). Loads nothing.
bool cuda_compiled();

// Number of usable CUDA devices: 0 without CUDA support, without the backend's library, without a
// driver, or without a GPU. Loads the CUDA backend when the build has one.
int cuda_device_count();

// Runs a small kernel on CUDA device 0 and checks its result. FailedPrecondition when no device
// is usable (with the reason: no CUDA in this build, the backend's library missing, the
// driver's error), Internal on a wrong result. Loads the CUDA backend.
absl::Status cuda_self_test();

// One line describing the devices, for logs and `troupe status`. Loads the CUDA backend.
std::string describe_devices();

// True once this process has loaded the CUDA backend (and with it the CUDA runtime). A process
// that has only computed on the CPU answers false.
bool cuda_backend_loaded();

}  // namespace troupe::nn
