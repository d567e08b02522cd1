// What the tests that compare troupe with PyTorch or transformers share: a shell command's exit
// code and output, and the Python that has torch, transformers and safetensors, if any
// (tests/reference/setup_reference_env.sh installs one).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace troupe::testing {

struct Shell {
  int code = -1;
  std::string output;  // stdout and stderr together
};

inline Shell shell(const std::string& command) {
  Shell run;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), p)) > 0)
    run.output.append(buffer, n);
  const int status = pclose(p);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// $TROUPE_TORCH_PYTHON, the reference environment's Python, or python3: the first that imports
// torch, transformers and safetensors.
inline std::optional<std::string> reference_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TROUPE_TORCH_PYTHON"); env != nullptr && *env != '\0')
    candidates.push_back(env);
  candidates.push_back("/tmp/torchenv/bin/python");
  candidates.push_back("python3");
  for (const std::string& python : candidates) {
    const std::string probe =
        "timeout 120 '" + python + "' -c 'import torch, transformers, safetensors' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return python;
  }
  return std::nullopt;
}

}  // namespace troupe::testing
