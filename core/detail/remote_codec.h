// How calls cross processes, on top of Codec: arguments as a tuple of
// values in order; a result as its Status, then the value when it is OK.
// Internal to core.
#pragma once

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/codec.h"
#include "core/future.h"

namespace troupe::detail {

template <class U>
constexpr bool kResultCodable = std::is_void_v<U> || Codable<U>;

template <class... P>
constexpr bool kArgsCodable = (Codable<P> && ...);

// "(int32, string)": for errors about what cannot cross.
template <class... P>
std::string arg_type_names() {
  std::string out = "(";
  ((out += type_name<P>() + ", "), ...);
  if (out.size() > 1) out.resize(out.size() - 2);
  return out + ")";
}

// How long the arguments a call is encoded from live.
enum class ArgsLifetime {
  // A call: its message holds them until the reply, after the send, and a
  // retry of an idempotent method encodes them again. Values with Buffers
  // inside are written as views of them; a Buffer argument moves into `w`.
  kUntilReply,
  // A tell: its message is gone once the frame is queued. They are consumed
  // (Writer::consume): the Buffers in them travel with `w`.
  kUntilQueued,
};

// Encodes the arguments in order.
template <class... P>
absl::Status encode_args_tuple(Writer& w, std::tuple<P...>& args, std::string_view method,
                               ArgsLifetime lifetime) {
  if constexpr (kArgsCodable<P...>) {
    if (lifetime == ArgsLifetime::kUntilQueued) {
      std::apply([&](auto&... a) { (w.consume(a), ...); }, args);
    } else {
      std::apply([&](auto&... a) { (w.write(std::move(a)), ...); }, args);
    }
    return w.status();
  } else {
    return absl::UnimplementedError(absl::StrCat(std::string(method),
                                                 " cannot be called in another process: not every "
                                                 "parameter type has a Codec"));
  }
}

// Encodes a call's result, consuming the value (Writer::consume).
template <class U>
void encode_result(Writer& w, Result<U>&& r) {
  if constexpr (std::is_void_v<U>) {
    w.write(r);
  } else {
    w.write(r.status());
    if (r.ok()) w.consume(*r);
  }
}

template <class U>
Result<U> decode_result(Reader& in) {
  absl::Status status;
  if (!in.read(status)) return in.status();
  if (!status.ok()) return status;
  if constexpr (std::is_void_v<U>) {
    return absl::OkStatus();
  } else {
    U value{};
    if (!in.read(value)) return in.status();
    return value;
  }
}

}  // namespace troupe::detail
