#include "transport/collectives/dtype.h"

namespace troupe::transport {

size_t element_size(DType type) {
  switch (type) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

std::string_view to_string(DType type) {
  switch (type) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
  }
  return "unknown";
}

}  // namespace troupe::transport
