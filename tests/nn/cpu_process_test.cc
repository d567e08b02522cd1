// A process that trains on the CPU stays light: it maps neither the CUDA runtime nor cuBLAS nor
// NCCL, even in a build with CUDA (docs/gpu.md, "CPU processes stay light"). Its own binary, so
// that no earlier test in the process has asked for a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "nn/device.h"
#include "nn/device_backend.h"
#include "nn/gpt2/config.h"
#include "nn/memory.h"
#include "nn/model/model.h"
#include "tests/common/mapped_libraries.h"

namespace troupe::nn {
namespace {

using troupe::testing::kGpuLibraries;
using troupe::testing::mapped_libraries;

TEST(CpuProcessTest, TrainingOnTheCpuLoadsNoGpuLibrary) {
  const GPTConfig config = {.max_seq_len = 16,
                            .vocab_size = 64,
                            .padded_vocab_size = 64,
                            .num_layers = 2,
                            .num_heads = 2,
                            .channels = 32};
  absl::StatusOr<std::unique_ptr<Model>> model = create_model(config);
  ASSERT_TRUE(model.ok()) << model.status();
  (*model)->init_parameters(1);
  std::vector<int32_t> tokens(2 * 8);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i * 7 % 64);
  (*model)->zero_grad();
  ASSERT_TRUE((*model)->forward(tokens.data(), tokens.data(), 2, 8).ok());
  ASSERT_TRUE((*model)->backward().ok());
  const size_t n = (*model)->num_params();
  std::vector<float> m(n), v(n);
  DeviceBackend& cpu = cpu_backend();
  ASSERT_TRUE(cpu.adamw_update(0, {.params = (*model)->params(),
                                   .grads = (*model)->grads(),
                                   .m = m.data(),
                                   .v = v.data(),
                                   .n = n,
                                   .lr = 1e-3f,
                                   .step = 1})
                  .ok());
  ASSERT_TRUE(check_device(Device::cpu()).ok());

  EXPECT_FALSE(cuda_backend_loaded());
  EXPECT_EQ(mapped_libraries(kGpuLibraries), std::vector<std::string>{});

  // The check can see them: asking for CUDA maps the backend and the runtime (when built in).
  if (!cuda_compiled()) GTEST_SKIP() << "this build has no CUDA: nothing more to see";
  (void)cuda_device_count();
  EXPECT_TRUE(cuda_backend_loaded());
  EXPECT_FALSE(mapped_libraries({"libcudart"}).empty());
  EXPECT_FALSE(mapped_libraries({"libtroupe_nn_cuda"}).empty());
}

}  // namespace
}  // namespace troupe::nn
