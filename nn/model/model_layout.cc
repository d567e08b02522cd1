// The architectures' layouts behind the seam (model.h's validate_slice, count_tensors and
// model_layout), apart from their models: what reads configs, model files and manifests needs
// these and the layouts, not the kernels. Adding an architecture adds a case to each, as in
// model.cc (docs/models.md, "Adding an architecture").
#include "nn/gpt2/layout.h"
#include "nn/llama/layout.h"
#include "nn/model/model.h"

namespace troupe::nn {

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

}  // namespace troupe::nn
