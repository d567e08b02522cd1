// The architectures behind the seam: each function below picks the config's. Adding an
// architecture adds a case to each (docs/models.md, "Adding an architecture").
#include "nn/model/model.h"

#include <utility>

#include "nn/gpt2/gpt.h"
#include "nn/gpt2/layout.h"
#include "nn/llama/layout.h"
#include "nn/llama/llama.h"

namespace troupe::nn {

absl::StatusOr<std::unique_ptr<Model>> create_model(const ModelConfig& config,
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

absl::Status validate_slice(const ModelConfig& config, const TensorSlice& slice) {
  if (const GPTConfig* g = config.gpt2()) return validate_slice(*g, slice);
  return validate_slice(*config.llama(), slice);
}

size_t count_tensors(const ModelConfig& config) {
  if (const GPTConfig* g = config.gpt2()) return 4 + kNumBlockTensors * size_t(g->num_layers);
  const LlamaConfig& l = *config.llama();
  return 2 + kNumLlamaBlockTensors * size_t(l.num_hidden_layers) + (l.tie_word_embeddings ? 0 : 1);
}

ModelLayout model_layout(const ModelConfig& config, const TensorSlice& slice) {
  if (const GPTConfig* g = config.gpt2()) return GPTParamLayout(*g, slice).model();
  return LlamaLayout(*config.llama(), slice).model();
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
