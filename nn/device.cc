#include "nn/device.h"

#include "absl/strings/str_cat.h"

namespace troupe::nn {

#ifndef TROUPE_HAVE_CUDA
bool cuda_compiled() {
  return false;
}
int cuda_device_count() {
  return 0;
}
absl::Status cuda_self_test() {
  return absl::FailedPreconditionError("this build of troupe has no CUDA support");
}
#endif

std::string describe_devices() {
  if (!cuda_compiled()) return "cpu (built without CUDA)";
  int n = cuda_device_count();
  if (n == 0) return "cpu (CUDA built in, no GPU found)";
  return absl::StrCat("cpu + ", n, " CUDA device(s)");
}

}  // namespace troupe::nn
