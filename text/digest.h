// SHA-256 of bytes, as lowercase hex: how a tokenizer's vocabulary is identified (tokenizer.h).
#pragma once

#include <string>
#include "absl/strings/string_view.h"

namespace troupe::text {

// The 64 hex digits of the SHA-256 of `bytes`.
std::string sha256_hex(absl::string_view bytes);

}  // namespace troupe::text
