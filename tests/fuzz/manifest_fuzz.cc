// libFuzzer target for a checkpoint's manifest.json: any text must decode
// to a manifest whose encoding decodes (its checksum checked) and encodes to
// the same text, or give DataLoss.
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
    const std::string encoded = troupe::checkpoint::encode_manifest(*manifest);
    auto again = troupe::checkpoint::decode_manifest(encoded, "again");
    if (!again.ok() || troupe::checkpoint::encode_manifest(*again) != encoded) std::abort();
  } else if (!absl::IsDataLoss(manifest.status())) {
    std::abort();
  }
  return 0;
}
