// libFuzzer target for a checkpoint's manifest.json: any text must decode
// to a manifest that encodes and decodes back to itself, or give DataLoss.
// The manifest's own checksum is not checked here (the fuzzer could not get
// past it); everything behind it is.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto manifest = troupe::checkpoint::decode_manifest(text, "manifest.json",
                                                      /*verify_checksum=*/false);
  if (manifest.ok()) {
    auto again = troupe::checkpoint::decode_manifest(troupe::checkpoint::encode_manifest(*manifest),
                                                     "again");
    if (!again.ok() || !(*again == *manifest)) std::abort();
  } else if (!absl::IsDataLoss(manifest.status())) {
    std::abort();
  }
  return 0;
}
