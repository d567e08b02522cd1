#include "nn/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nn/gemm.h"
#include "nn/threads.h"

namespace troupe::nn {
namespace {

constexpr int kSize = 512;
constexpr int kRuns = 12;

// The CPU's model name, from /proc/cpuinfo ("unknown" elsewhere).
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

std::string cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string dir = xdg != nullptr && *xdg != '\0'     ? std::string(xdg)
                    : home != nullptr && *home != '\0' ? absl::StrCat(home, "/.cache")
                                                       : std::string();
  return dir.empty() ? std::string() : absl::StrCat(dir, "/troupe/cpu_peak");
}

}  // namespace

double measure_sgemm_peak() {
  const int threads = num_threads();
  set_num_threads(1);
  std::vector<float> a(static_cast<size_t>(kSize) * kSize, 0.5f);
  std::vector<float> b(a.size(), 0.25f), c(a.size(), 0.0f);
  double best = 0;
  for (int run = 0; run < kRuns; ++run) {
    const auto start = std::chrono::steady_clock::now();
    gemm(false, false, kSize, kSize, kSize, 1.0f, a.data(), kSize, b.data(), kSize, 0.0f, c.data(),
         kSize);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s > 0) best = std::max(best, 2.0 * kSize * kSize * kSize / s);
  }
  set_num_threads(threads);
  return best;
}

CpuPeak cpu_sgemm_peak() {
  const std::string key = absl::StrCat(cpu_model(), " | ", gemm_backend());
  const std::string file = cache_file();
  if (!file.empty()) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      const size_t bar = line.rfind(" | ");
      double value = 0;
      if (bar != std::string::npos && line.substr(0, bar) == key &&
          absl::SimpleAtod(line.substr(bar + 3), &value) && value > 0) {
        return {value, absl::StrCat("cached in ", file)};
      }
    }
  }
  CpuPeak peak{measure_sgemm_peak(), "measured"};
  if (!file.empty() && peak.flops_per_s > 0) {
    std::error_code error;
    std::filesystem::create_directories(std::filesystem::path(file).parent_path(), error);
    std::ofstream out(file, std::ios::app);
    if (out) out << key << " | " << peak.flops_per_s << "\n";
  }
  return peak;
}

}  // namespace troupe::nn
