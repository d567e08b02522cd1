// The architectures behind the seam: each function below picks the config's. Adding an
// architecture adds a case to each, and to those of model_layout.cc (docs/models.md, "Adding an
// architecture").
#include "nn/model/model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nn/device_backend.h"
#include "nn/gpt2/gpt.h"
#include "nn/llama/llama.h"

namespace troupe::nn {

absl::StatusOr<std::unique_ptr<Model>> create_model(const ModelConfig& config,
                                                    const ModelOptions& options,
                                                    const ModelStorage& storage,
                                                    const TensorSlice& slice) {
  if (storage.device.is_cpu()) return detail::create_cpu_model(config, options, storage, slice);
  if (absl::Status usable = check_device(storage.device); !usable.ok()) return usable;
  absl::StatusOr<DeviceBackend*> b = backend(storage.device.kind);
  if (!b.ok()) return b.status();
  return (*b)->create_model(storage.device.index, config, options, storage, slice);
}

absl::StatusOr<std::unique_ptr<Model>> detail::create_cpu_model(const ModelConfig& config,
                                                                const ModelOptions& options,
                                                                const ModelStorage& storage,
                                                                const TensorSlice& slice) {
  if (const GPTConfig* g = config.gpt2()) {
    absl::StatusOr<GPT> gpt = GPT::create(*g, options, storage, slice);
    if (!gpt.ok()) return gpt.status();
    return std::unique_ptr<Model>(std::make_unique<GPT>(std::move(*gpt)));
  }
  absl::StatusOr<Llama> llama = Llama::create(*config.llama(), options, storage, slice);
  if (!llama.ok()) return llama.status();
  return std::unique_ptr<Model>(std::make_unique<Llama>(std::move(*llama)));
}

absl::StatusOr<std::unique_ptr<Decoder>> Model::make_decoder(int /*batch*/, int /*capacity*/) {
  return absl::UnimplementedError("this model has no incremental decoder (make_decoder)");
}

void init_parameters(const ModelConfig& config, const TensorSlice& slice, uint64_t seed,
                     size_t begin, size_t end, float* out) {
  if (const GPTConfig* g = config.gpt2()) {
    GPT::init_parameters(*g, slice, seed, begin, end, out);
    return;
  }
  Llama::init_parameters(*config.llama(), slice, seed, begin, end, out);
}

}  // namespace troupe::nn
