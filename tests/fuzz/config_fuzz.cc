// libFuzzer target for the training config (DeepSpeed's JSON, troupe's keys):
// any text must parse to a config that passes its own checks, or to an
// InvalidArgument; never a crash, a hang or an unbounded allocation.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "trainers/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<troupe::trainers::TrainConfig> config = troupe::trainers::parse_train_config(text);
  if (config.ok()) {
    // What parsed is within the bounds the parser promises.
    const troupe::nn::ModelConfig& m = config->model;
    if (!m.validate().ok() || m.num_layers() > troupe::trainers::kMaxLayers ||
        config->parallel.dp > troupe::trainers::kMaxParallel) {
      std::abort();
    }
  } else if (!absl::IsInvalidArgument(config.status())) {
    std::abort();
  }
  return 0;
}
