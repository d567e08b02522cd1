#include "core/codec.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace troupe {
namespace {

constexpr int kMaxStatusCode = static_cast<int>(absl::StatusCode::kUnauthenticated);

absl::string_view to_absl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

void write_string(Writer& w, std::string_view s) {
  if (w.write_count(s.size(), &type_name<std::string>)) w.write_bytes(s.data(), s.size());
}

}  // namespace

// ---- Writer ---------------------------------------------------------------

void Writer::write_bytes(const void* data, size_t n) {
  if (n == 0) return;
  const auto* p = static_cast<const std::byte*>(data);
  bytes_.insert(bytes_.end(), p, p + n);
}

void Writer::write(transport::Buffer&& buffer) {
  write(add_buffer(std::move(buffer)));
}

uint32_t Writer::add_buffer(transport::Buffer buffer) {
  buffers_.push_back(std::move(buffer));
  return static_cast<uint32_t>(buffers_.size() - 1);
}

void Writer::hold_views(size_t first, const std::shared_ptr<const void>& owner) {
  for (size_t i = first; i < buffers_.size(); ++i) {
    transport::Buffer& view = buffers_[i];
    view = transport::Buffer::borrow(owner, view.data(), view.size());
  }
}

bool Writer::write_count(size_t count, std::string (*container_name)()) {
  constexpr size_t kMaxCount = std::numeric_limits<uint32_t>::max();
  if (count > kMaxCount) {
    fail(absl::StrCat("value too large to encode: ", container_name(), " has ", count,
                      " elements; at most ", kMaxCount, " can be encoded"));
    write(static_cast<uint32_t>(kMaxCount));
    return false;
  }
  write(static_cast<uint32_t>(count));
  return true;
}

void Writer::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

absl::Status Writer::status() const {
  if (ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(error_);
}

// ---- Reader ---------------------------------------------------------------

Reader::Reader(std::span<const std::byte> bytes, std::span<transport::Buffer> buffers)
    : bytes_(bytes), buffers_(buffers) {}

bool Reader::read_bytes(void* out, size_t n) {
  if (!ok()) return false;
  if (n > remaining()) {
    return fail(absl::StrCat("truncated at byte ", position_, ": needs ", n, " bytes, ",
                             remaining(), " left"));
  }
  if (n != 0) std::memcpy(out, bytes_.data() + position_, n);
  position_ += n;
  return true;
}

bool Reader::read_count(uint32_t& count, size_t element_min_bytes,
                        std::string (*container_name)()) {
  if (!read(count)) return false;
  if (element_min_bytes == 0) {
    if (count <= kMaxEmptyElements) return true;
    return fail(absl::StrCat(container_name(), " declares ", count,
                             " elements that may encode to no bytes; at most ", kMaxEmptyElements,
                             " are accepted"));
  }
  if (count <= remaining() / element_min_bytes) return true;
  return fail(absl::StrCat(container_name(), " declares ", count, " elements of at least ",
                           element_min_bytes, " bytes, but only ", remaining(), " bytes remain"));
}

bool Reader::take_buffer(uint32_t index, transport::Buffer& out) {
  if (!ok()) return false;
  if (index >= buffers_.size()) {
    return fail(absl::StrCat("buffer index ", index, " out of range: the message has ",
                             buffers_.size(), " out-of-band buffers"));
  }
  if (taken_.empty()) taken_.resize(buffers_.size());
  if (taken_[index]) return fail(absl::StrCat("buffer ", index, " is referred to twice"));
  taken_[index] = true;
  out = std::move(buffers_[index]);
  return true;
}

bool Reader::fail(std::string why) {
  if (!failed_) {
    failed_ = true;
    error_ = std::move(why);
  }
  return false;
}

absl::Status Reader::status() const {
  if (ok()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("malformed value: ", error_));
}

bool Reader::enter() {
  if (depth_ >= kMaxDepth) {
    return fail(absl::StrCat("containers nested deeper than ", kMaxDepth, " levels"));
  }
  ++depth_;
  return true;
}

// ---- Non-template codecs --------------------------------------------------

void Codec<bool>::encode(Writer& w, bool value) {
  w.write(uint8_t{value});
}

bool Codec<bool>::decode(Reader& r, bool& out) {
  uint8_t byte;
  if (!r.read(byte)) return false;
  if (byte > 1) return r.fail(absl::StrCat("bool byte is ", int{byte}, ", not 0 or 1"));
  out = byte == 1;
  return true;
}

void Codec<std::string>::encode(Writer& w, const std::string& s) {
  write_string(w, s);
}

bool Codec<std::string>::decode(Reader& r, std::string& out) {
  uint32_t length;
  if (!r.read_count(length, 1, &type_name<std::string>)) return false;
  out.resize(length);
  return r.read_bytes(out.data(), length);
}

void Codec<absl::Status>::encode(Writer& w, const absl::Status& status) {
  if (status.ok()) {
    w.write(uint8_t{0});
    return;
  }
  uint8_t code = IsActorDied(status) ? kActorDiedCode : static_cast<uint8_t>(status.code());
  w.write(code);
  absl::string_view message = status.message();
  write_string(w, std::string_view(message.data(), message.size()));
}

bool Codec<absl::Status>::decode(Reader& r, absl::Status& out) {
  uint8_t code;
  if (!r.read(code)) return false;
  if (code == 0) {
    out = absl::OkStatus();
    return true;
  }
  if (code > kMaxStatusCode && code != kActorDiedCode) {
    return r.fail(absl::StrCat("status code ", int{code}, " is not an absl::StatusCode"));
  }
  std::string message;
  if (!r.read(message)) return false;
  if (code == kActorDiedCode) {
    out = ActorDiedError(message);
  } else {
    out = absl::Status(static_cast<absl::StatusCode>(code), to_absl(message));
  }
  return true;
}

void Codec<transport::Buffer>::encode(Writer& w, const transport::Buffer& buffer) {
  auto* data = const_cast<std::byte*>(buffer.data());  // a view: sending never writes to it
  w.write(w.add_buffer(transport::Buffer::borrow(w.view_owner(), data, buffer.size())));
}

bool Codec<transport::Buffer>::decode(Reader& r, transport::Buffer& out) {
  uint32_t index;
  return r.read(index) && r.take_buffer(index, out);
}

// ---- Names ----------------------------------------------------------------

namespace detail {

std::string arithmetic_name(bool floating, bool is_signed, size_t size) {
  const char* kind = floating ? "float" : is_signed ? "int" : "uint";
  return absl::StrCat(kind, size * 8);
}

std::string type_from_signature(std::string_view signature) {
  // GCC: "... [with T = ns::Foo; std::string = ...]"; Clang: "... [T = ns::Foo]".
  constexpr std::string_view kMarker = "T = ";
  size_t begin = signature.find(kMarker);
  if (begin == std::string_view::npos) return std::string(signature);
  begin += kMarker.size();
  size_t end = signature.find(';', begin);
  if (end == std::string_view::npos) end = signature.rfind(']');
  if (end == std::string_view::npos || end < begin) end = signature.size();
  return std::string(signature.substr(begin, end - begin));
}

}  // namespace detail

}  // namespace troupe
