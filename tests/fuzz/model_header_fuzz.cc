// libFuzzer target for model.json, the header of saved weights: any text
// must give a header whose parameter count matches its model, or DataLoss.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nn/model/layout.h"
#include "trainers/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto header = troupe::trainers::parse_model_header(text, "model.json");
  if (header.ok()) {
    if (troupe::nn::model_layout(header->first.model).num_params() != header->second) {
      std::abort();
    }
  } else if (!absl::IsDataLoss(header.status())) {
    std::abort();
  }
  return 0;
}
