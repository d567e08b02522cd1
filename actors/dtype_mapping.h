// The one mapping between nn's element types and transport's. The two floors
// of the layering each define their own enum (neither may include the other);
// they have the same names and values, and this is where that is checked and
// where code that hands nn tensors to collectives converts, by name, never by
// a cast of the number.
#pragma once

#include "nn/dtype.h"
#include "transport/collectives/dtype.h"

namespace troupe::actors {

constexpr transport::DType to_transport(nn::DType type) {
  switch (type) {
    case nn::DType::kFloat32:
      return transport::DType::kFloat32;
    case nn::DType::kFloat16:
      return transport::DType::kFloat16;
    case nn::DType::kBFloat16:
      return transport::DType::kBFloat16;
  }
  return transport::DType::kFloat32;  // unreachable for a valid enum
}

constexpr nn::DType to_nn(transport::DType type) {
  switch (type) {
    case transport::DType::kFloat32:
      return nn::DType::kFloat32;
    case transport::DType::kFloat16:
      return nn::DType::kFloat16;
    case transport::DType::kBFloat16:
      return nn::DType::kBFloat16;
  }
  return nn::DType::kFloat32;  // unreachable for a valid enum
}

// The values agree too, so that a stray cast cannot swap fp16 and bf16.
static_assert(static_cast<int>(to_transport(nn::DType::kFloat16)) ==
              static_cast<int>(nn::DType::kFloat16));
static_assert(static_cast<int>(to_transport(nn::DType::kBFloat16)) ==
              static_cast<int>(nn::DType::kBFloat16));
static_assert(to_nn(to_transport(nn::DType::kBFloat16)) == nn::DType::kBFloat16);

}  // namespace troupe::actors
