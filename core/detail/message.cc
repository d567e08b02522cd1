#include "core/detail/message.h"

#include "absl/strings/str_cat.h"

namespace troupe::detail {

absl::Status Message::encode_args(Writer&) {
  return absl::UnimplementedError(
      absl::StrCat(std::string(method_name()), " cannot be sent to another process"));
}

void Message::complete_remote(Reader&) {
  reject(absl::InternalError("a reply arrived for a message that expects none"));
}

}  // namespace troupe::detail
