// Whole small files (a vocabulary, a merges list), read for the tokenizers.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace troupe::text {

// The bytes of `path`. NotFound naming it when it does not exist; InvalidArgument when it is a
// directory; Internal with errno's text for another failure; InvalidArgument over max_bytes.
absl::StatusOr<std::string> read_file_text(const std::string& path,
                                           size_t max_bytes = size_t{1} << 30);

bool is_directory(const std::string& path);
bool file_exists(const std::string& path);

}  // namespace troupe::text
