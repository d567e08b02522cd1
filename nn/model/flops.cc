#include "nn/model/flops.h"

#include "nn/model/model.h"

namespace troupe::nn {

size_t matmul_params(const ModelConfig& config) {
  const ModelLayout layout = model_layout(config);
  size_t n = layout.num_params() - layout.embedding().size();
  if (layout.tied_head()) n += layout.token_embedding().size();
  return n;
}

double training_flops_per_token(const ModelConfig& config, int seq_len) {
  return 6.0 * static_cast<double>(matmul_params(config)) +
         12.0 * config.num_layers() * config.hidden_size() * static_cast<double>(seq_len);
}

}  // namespace troupe::nn
