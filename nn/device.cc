#include "nn/device.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "nn/device_backend.h"

namespace troupe::nn {

const char* to_string(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? "cpu" : "cuda";
}

std::string to_string(Device device) {
  if (device.is_cpu()) return "cpu";
  return absl::StrCat("cuda:", device.index);
}

absl::StatusOr<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view kCudaColon = "cuda:";
  if (text.starts_with(kCudaColon)) {
    const std::string_view digits = text.substr(kCudaColon.size());
    int index = -1;
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && error == std::errc() && end == digits.data() + digits.size() &&
        index >= 0) {
      return Device::cuda(index);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("device \"", std::string(text), "\": expected \"cpu\", \"cuda\" or \"cuda:N\""));
}

bool cuda_compiled() {
#ifdef TROUPE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
  absl::StatusOr<DeviceBackend*> cuda = backend(DeviceKind::kCuda);
  return cuda.ok() ? (*cuda)->device_count() : 0;
}

absl::Status cuda_self_test() {
  absl::StatusOr<DeviceBackend*> cuda = backend(DeviceKind::kCuda);
  if (!cuda.ok()) return cuda.status();
  if ((*cuda)->device_count() == 0) return absl::FailedPreconditionError("no CUDA device");
  return (*cuda)->self_test(0);
}

std::string describe_devices() {
  absl::StatusOr<DeviceBackend*> cuda = backend(DeviceKind::kCuda);
  if (!cuda.ok()) return absl::StrCat("cpu (", cuda.status().message(), ")");
  const int n = (*cuda)->device_count();
  if (n == 0) return "cpu (CUDA built in, no GPU found)";
  std::string out = "cpu";
  for (int i = 0; i < n; ++i)
    absl::StrAppend(&out, ", ", (*cuda)->describe(i));
  return out;
}

}  // namespace troupe::nn
