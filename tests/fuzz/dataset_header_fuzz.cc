// libFuzzer target for PREFIX.json, a token dataset's header: any text must
// give a header within the format's bounds, or InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "actors/data/token_dataset_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto header = troupe::actors::parse_header(text, "tokens.json");
  if (header.ok()) {
    if (header->vocab_size < 1 || header->vocab_size > troupe::actors::kMaxVocabSize ||
        header->num_tokens < 0 ||
        header->dtype != troupe::actors::dtype_for_vocab(header->vocab_size)) {
      std::abort();
    }
  } else if (!absl::IsInvalidArgument(header.status())) {
    std::abort();
  }
  return 0;
}
