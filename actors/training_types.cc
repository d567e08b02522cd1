#include "actors/training_types.h"

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

}  // namespace troupe::actors
