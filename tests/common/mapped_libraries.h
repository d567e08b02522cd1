// What a test process has mapped: for checking that a CPU-only process loads no GPU library
// (docs/gpu.md, "CPU processes stay light").
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace troupe::testing {

// The libraries the CUDA and NCCL backends bring in, and the backends themselves.
inline const std::vector<std::string> kGpuLibraries = {
    "libcudart", "libcublas", "libnccl", "libcuda.so", "libtroupe_nccl", "libtroupe_nn_cuda"};

// The paths in /proc/self/maps whose line names one of `names`.
inline std::vector<std::string> mapped_libraries(const std::vector<std::string>& names) {
  std::ifstream maps("/proc/self/maps");
  std::vector<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    for (const std::string& name : names) {
      if (line.find(name) != std::string::npos) {
        found.push_back(line.substr(line.find('/') == std::string::npos ? 0 : line.find('/')));
        break;
      }
    }
  }
  return found;
}

}  // namespace troupe::testing
