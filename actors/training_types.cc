#include "actors/training_types.h"

#include <algorithm>

namespace troupe::actors {

nn::AdamWConfig OptimizerSpec::adamw(float lr) const {
  return {.lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay};
}

nn::SgdConfig OptimizerSpec::sgd(float lr) const {
  return {.lr = lr,
          .momentum = momentum,
          .dampening = dampening,
          .weight_decay = weight_decay,
          .nesterov = nesterov};
}

MemoryReport MemoryReport::max_with(const MemoryReport& o) const {
  return {.parameters = std::max(parameters, o.parameters),
          .gradients = std::max(gradients, o.gradients),
          .optimizer_state = std::max(optimizer_state, o.optimizer_state),
          .buffers = std::max(buffers, o.buffers),
          .activations = std::max(activations, o.activations),
          .peak_rss = std::max(peak_rss, o.peak_rss)};
}

MemoryReport MemoryReport::plus(const MemoryReport& o) const {
  return {.parameters = parameters + o.parameters,
          .gradients = gradients + o.gradients,
          .optimizer_state = optimizer_state + o.optimizer_state,
          .buffers = buffers + o.buffers,
          .activations = activations + o.activations,
          .peak_rss = std::max(peak_rss, o.peak_rss)};
}

TrafficReport TrafficReport::plus(const TrafficReport& o) const {
  return {.allreduce = allreduce + o.allreduce,
          .reduce_scatter = reduce_scatter + o.reduce_scatter,
          .allgather = allgather + o.allgather,
          .pipeline = pipeline + o.pipeline,
          .tensor_parallel = tensor_parallel + o.tensor_parallel,
          .pipeline_received_in_place = pipeline_received_in_place + o.pipeline_received_in_place};
}

TrafficReport TrafficReport::max_with(const TrafficReport& o) const {
  return {.allreduce = std::max(allreduce, o.allreduce),
          .reduce_scatter = std::max(reduce_scatter, o.reduce_scatter),
          .allgather = std::max(allgather, o.allgather),
          .pipeline = std::max(pipeline, o.pipeline),
          .tensor_parallel = std::max(tensor_parallel, o.tensor_parallel),
          .pipeline_received_in_place =
              std::max(pipeline_received_in_place, o.pipeline_received_in_place)};
}

}  // namespace troupe::actors
