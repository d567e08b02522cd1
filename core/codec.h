// Codec: how actor-call arguments and results are encoded when a call crosses
// a process boundary.
//
// A value encodes to an inline byte stream (Writer::bytes()) plus out-of-band
// buffers (Writer::buffers()) that travel beside the message, uncopied, as a
// transport::Frame's buffers do. The format has no type tags or field names:
// both sides agree on the types, as an actor method's signature guarantees.
// Integers are little-endian.
//
//   bool                           u8, 0 or 1
//   integers, float, double        their bytes (int32: 4, float64: 8, ...)
//   enums                          their underlying integer
//   std::string                    u32 length, then the bytes
//   vector<T>                      u32 count, then the elements (of arithmetic T: one block)
//   array<T, N>                    the N elements, no count
//   map, unordered_map,
//   flat_hash_map                  u32 count, then key and value of each entry
//   set, unordered_set,
//   flat_hash_set                  u32 count, then the keys
//   optional<T>                    u8 0 (empty), or 1 and then the value
//   pair, tuple, TROUPE_FIELDS     the members in order
//   monostate                      nothing
//   absl::Status                   u8 code: an absl::StatusCode, or 255 for ActorDied
//                                  (core/status.h); unless OK, then the message as a
//                                  string. Other payloads are dropped.
//   absl::StatusOr<T>              the status; when OK, then the value
//   ActorId                        u64
//   ActorRef<T>                    u64 actor id, u64 type id, u32 node it was last seen
//                                  on (core/actor_ref.h; id 0: an invalid ref)
//   transport::Buffer              u32 index into the out-of-band buffers
//
// Decoding reads bytes from the network and trusts none of them: every read is
// bounds-checked; a count is rejected, before anything is allocated, unless
// that many elements could fit in the bytes that remain; containers nest at
// most Reader::kMaxDepth deep; bools, status codes, buffer indices and
// duplicate keys are checked. A malformed input makes Reader::status() an
// InvalidArgument error that says what was wrong.
//
// Making a type codable: put TROUPE_FIELDS(a, b, c) in a public section of the
// struct, or specialise Codec<T> with
//   static void encode(Writer&, const T&);
//   static bool decode(Reader&, T&);       // false once Reader::fail() was called
//   static std::string name();             // optional: for type_name<T>()
//   static constexpr size_t min_bytes();   // optional: the fewest bytes a value takes
// On a failed decode the target holds some valid but unspecified value.
#pragma once

#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ids.h"
#include "transport/buffer.h"

namespace troupe {

static_assert(std::endian::native == std::endian::little, "the codec format is little-endian");

class Writer;
class Reader;
namespace detail {
class ActorResolver;  // core/detail/actor_resolver.h
}

template <class T, class Enable = void>
struct Codec;  // left undefined: a type is codable once it has a specialisation

template <class T>
concept Codable = requires(Writer& w, Reader& r, const T& c, T& m) {
  Codec<T>::encode(w, c);
  { Codec<T>::decode(r, m) } -> std::same_as<bool>;
};

// A short name for error messages: "int32", "string", "vector<float32>".
// Types whose Codec has no name() show as the compiler spells them.
template <class T>
std::string type_name();

// The fewest bytes any value of T encodes to (0 when its Codec does not say).
template <class T>
constexpr size_t min_encoded_bytes() {
  if constexpr (requires { Codec<T>::min_bytes(); }) {
    return Codec<T>::min_bytes();
  } else {
    return 0;
  }
}

// Builds the encoding of one or more values.
class Writer {
 public:
  // Appends raw bytes to the inline byte stream.
  void write_bytes(const void* data, size_t n);

  template <class T>
  void write(const T& value) {
    Codec<std::decay_t<T>>::encode(*this, value);
  }
  // Moves `buffer` out of band: the Writer owns it from here on. (Writing a
  // const Buffer& instead adds a view of it; see Codec<transport::Buffer>.)
  void write(transport::Buffer&& buffer);
  // Writes `value` and takes it over, so that the Buffers in it stay alive
  // as long as buffers() however long a send takes: a Buffer moves in, and a
  // value with Buffers inside (a struct's field) moves into a holder that
  // its views keep alive (the bytes themselves do not move). What a call's
  // result and a tell's arguments are written with; `value` is left
  // moved-from.
  template <class T>
  void consume(T& value) {
    if constexpr (std::is_same_v<std::decay_t<T>, transport::Buffer>) {
      write(std::move(value));
    } else {
      const size_t first = buffers_.size();
      write(value);
      if (buffers_.size() > first) {
        hold_views(first, std::make_shared<std::decay_t<T>>(std::move(value)));
      }
    }
  }

  // Adds an out-of-band buffer (sent beside the message, never copied into
  // it); returns its index.
  uint32_t add_buffer(transport::Buffer buffer);

  // Writes a u32 element count. A count that does not fit records an error
  // (see status()) and returns false; the caller then writes no elements,
  // which leaves a count that the decoder rejects.
  bool write_count(size_t count, std::string (*container_name)());

  // Buffers written as const references are added as views of their bytes
  // (see Codec<transport::Buffer>). Each view made while `owner` is set holds
  // it until the view is destroyed: set it to whatever keeps those Buffers
  // alive (the message holding the arguments) when the views may outlive it.
  void set_view_owner(std::shared_ptr<const void> owner) { view_owner_ = std::move(owner); }
  const std::shared_ptr<const void>& view_owner() const { return view_owner_; }

  // How ActorRefs among the values are written (Codec<ActorRef<T>>): set by
  // the cluster node that sends them. Without one an ActorRef cannot be
  // encoded.
  void set_actor_resolver(detail::ActorResolver* resolver) { actors_ = resolver; }
  detail::ActorResolver* actor_resolver() const { return actors_; }

  std::vector<std::byte>& bytes() { return bytes_; }
  std::vector<transport::Buffer>& buffers() { return buffers_; }

  // Records the first error (a value that cannot be encoded); later ones are
  // ignored.
  void fail(std::string why);
  // OK, or InvalidArgument saying why a value could not be encoded (too
  // large, or an ActorRef with no node to send it from).
  bool ok() const { return error_.empty(); }
  absl::Status status() const;

 private:
  // Makes `owner` keep alive the views buffers_[first..] (consume).
  void hold_views(size_t first, const std::shared_ptr<const void>& owner);

  std::vector<std::byte> bytes_;
  std::vector<transport::Buffer> buffers_;
  std::shared_ptr<const void> view_owner_;
  detail::ActorResolver* actors_ = nullptr;
  std::string error_;
};

// Decodes values from an encoding. The first failure sticks: every later read
// returns false, and status() reports the first reason.
class Reader {
 public:
  static constexpr int kMaxDepth = 64;
  // Elements that may encode to no bytes at all (monostate, empty structs)
  // have no input to bound their count, so it is capped instead.
  static constexpr uint32_t kMaxEmptyElements = uint32_t{1} << 16;

  // Reads `bytes`; out-of-band buffers are taken (moved) from `buffers` as
  // values refer to them. Both must outlive the Reader.
  Reader(std::span<const std::byte> bytes, std::span<transport::Buffer> buffers);
  explicit Reader(std::span<const std::byte> bytes) : Reader(bytes, {}) {}

  // Copies the next n bytes to `out`; false, with an error, if fewer remain.
  bool read_bytes(void* out, size_t n);

  template <class T>
  bool read(T& out) {
    return ok() && Codec<T>::decode(*this, out);
  }

  // Reads a u32 count of elements that each take at least `element_min_bytes`
  // and fails unless that many could fit in what remains.
  bool read_count(uint32_t& count, size_t element_min_bytes, std::string (*container_name)());

  // Takes out-of-band buffer `index` (each at most once); false, with an
  // error, if it is out of range or already taken.
  bool take_buffer(uint32_t index, transport::Buffer& out);

  // Records the first error (later ones are ignored) and returns false.
  bool fail(std::string why);
  bool ok() const { return !failed_; }

  // How ActorRefs among the values are read: set by the cluster node that
  // received them. Without one an ActorRef cannot be decoded.
  void set_actor_resolver(detail::ActorResolver* resolver) { actors_ = resolver; }
  detail::ActorResolver* actor_resolver() const { return actors_; }
  // OK, or InvalidArgument("malformed value: <why>").
  absl::Status status() const;

  size_t remaining() const { return bytes_.size() - position_; }
  size_t position() const { return position_; }

  // Nesting guard for recursive containers: enter() fails past a depth of
  // kMaxDepth; each successful enter() is paired with a leave().
  bool enter();
  void leave() { --depth_; }
  // Runs `decode` one level deeper.
  template <class F>
  bool nested(F&& decode) {
    if (!enter()) return false;
    bool decoded = decode();
    leave();
    return decoded;
  }

 private:
  std::span<const std::byte> bytes_;
  std::span<transport::Buffer> buffers_;
  detail::ActorResolver* actors_ = nullptr;
  std::vector<bool> taken_;  // sized on the first take_buffer()
  size_t position_ = 0;
  int depth_ = 0;
  bool failed_ = false;
  std::string error_;
};

// Encodes `values` in order.
template <class... T>
void encode_values(Writer& w, const T&... values) {
  (w.write(values), ...);
}

// Decodes `values` in order and requires that no inline bytes are left over.
template <class... T>
absl::Status decode_values(Reader& r, T&... values);

// Makes a struct codable as its listed members, in order. Place it in a public
// section of the struct body: TROUPE_FIELDS(step, loss, weights);
// (It ends in a declaration, so that it takes the semicolon.)
#define TROUPE_FIELDS(...)        \
  auto troupe_fields() {          \
    return std::tie(__VA_ARGS__); \
  }                               \
  auto troupe_fields() const {    \
    return std::tie(__VA_ARGS__); \
  }                               \
  static_assert(true)

// ---- Scalars --------------------------------------------------------------

namespace detail {

template <class T>
concept Arithmetic = (std::is_integral_v<T> && !std::is_same_v<T, bool>) ||
                     std::is_same_v<T, float> || std::is_same_v<T, double>;

std::string arithmetic_name(bool floating, bool is_signed, size_t size);
// Takes the type out of a __PRETTY_FUNCTION__ signature with "T = <type>".
std::string type_from_signature(std::string_view signature);

template <class T>
std::string compiler_type_name() {
  return type_from_signature(__PRETTY_FUNCTION__);
}

}  // namespace detail

template <detail::Arithmetic T>
struct Codec<T> {
  static constexpr size_t min_bytes() { return sizeof(T); }
  static std::string name() {
    if constexpr (std::is_same_v<T, char>) return "char";
    return detail::arithmetic_name(std::is_floating_point_v<T>, std::is_signed_v<T>, sizeof(T));
  }
  static void encode(Writer& w, T value) { w.write_bytes(&value, sizeof(T)); }
  static bool decode(Reader& r, T& out) { return r.read_bytes(&out, sizeof(T)); }
};

template <>
struct Codec<bool> {
  static constexpr size_t min_bytes() { return 1; }
  static std::string name() { return "bool"; }
  static void encode(Writer& w, bool value);
  static bool decode(Reader& r, bool& out);
};

template <class T>
requires std::is_enum_v<T>
struct Codec<T> {
  using Underlying = std::underlying_type_t<T>;
  static constexpr size_t min_bytes() { return sizeof(T); }
  static std::string name() { return detail::compiler_type_name<T>(); }
  static void encode(Writer& w, T value) { w.write(static_cast<Underlying>(value)); }
  static bool decode(Reader& r, T& out) {
    Underlying value;
    if (!r.read(value)) return false;
    out = static_cast<T>(value);
    return true;
  }
};

template <>
struct Codec<std::monostate> {
  static constexpr size_t min_bytes() { return 0; }
  static std::string name() { return "monostate"; }
  static void encode(Writer&, std::monostate) {}
  static bool decode(Reader&, std::monostate&) { return true; }
};

template <>
struct Codec<ActorId> {
  static constexpr size_t min_bytes() { return 8; }
  static std::string name() { return "ActorId"; }
  static void encode(Writer& w, ActorId id) { w.write(id.value); }
  static bool decode(Reader& r, ActorId& out) { return r.read(out.value); }
};

template <>
struct Codec<std::string> {
  static constexpr size_t min_bytes() { return 4; }
  static std::string name() { return "string"; }
  static void encode(Writer& w, const std::string& s);
  static bool decode(Reader& r, std::string& out);
};

template <>
struct Codec<absl::Status> {
  static constexpr uint8_t kActorDiedCode = 255;
  static constexpr size_t min_bytes() { return 1; }
  static std::string name() { return "Status"; }
  static void encode(Writer& w, const absl::Status& status);
  static bool decode(Reader& r, absl::Status& out);
};

// A const Buffer is encoded as a borrowed view of its bytes, not a copy.
// REQUIRES: the Buffer stays alive and unchanged as long as the view (until
// the Writer's buffers() are sent or dropped), or the Writer's view_owner()
// keeps it alive. Writer::write(Buffer&&) hands over ownership instead.
// Decoding moves the buffer out of the Reader's buffers.
template <>
struct Codec<transport::Buffer> {
  static constexpr size_t min_bytes() { return 4; }
  static std::string name() { return "Buffer"; }
  static void encode(Writer& w, const transport::Buffer& buffer);
  static bool decode(Reader& r, transport::Buffer& out);
};

// ---- Sequences ------------------------------------------------------------

namespace detail {

// Decodes elements one by one into `out` (already sized).
template <class Range>
bool decode_elements(Reader& r, Range& out) {
  using T = typename Range::value_type;
  if constexpr (Arithmetic<T>) {
    return r.read_bytes(out.data(), out.size() * sizeof(T));
  } else if constexpr (std::is_same_v<T, bool>) {  // vector<bool> hands out proxies
    for (size_t i = 0; i < out.size(); ++i) {
      bool b;
      if (!r.read(b)) return false;
      out[i] = b;
    }
    return true;
  } else {
    for (T& e : out) {
      if (!r.read(e)) return false;
    }
    return true;
  }
}

template <class Range>
void encode_elements(Writer& w, const Range& values) {
  using T = typename Range::value_type;
  if constexpr (Arithmetic<T>) {
    w.write_bytes(values.data(), values.size() * sizeof(T));
  } else {
    for (const auto& e : values)
      w.write(static_cast<const T&>(e));
  }
}

}  // namespace detail

template <class T, class A>
requires Codable<T>
struct Codec<std::vector<T, A>> {
  using Vector = std::vector<T, A>;
  static constexpr size_t min_bytes() { return 4; }
  static std::string name() { return "vector<" + type_name<T>() + ">"; }
  static void encode(Writer& w, const Vector& values) {
    if (w.write_count(values.size(), &type_name<Vector>)) detail::encode_elements(w, values);
  }
  static bool decode(Reader& r, Vector& out) {
    return r.nested([&] {
      uint32_t count;
      if (!r.read_count(count, min_encoded_bytes<T>(), &type_name<Vector>)) return false;
      out.clear();
      out.resize(count);
      return detail::decode_elements(r, out);
    });
  }
};

template <class T, size_t N>
requires Codable<T>
struct Codec<std::array<T, N>> {
  static constexpr size_t min_bytes() { return N * min_encoded_bytes<T>(); }
  static std::string name() { return "array<" + type_name<T>() + "," + std::to_string(N) + ">"; }
  static void encode(Writer& w, const std::array<T, N>& values) {
    detail::encode_elements(w, values);
  }
  static bool decode(Reader& r, std::array<T, N>& out) { return detail::decode_elements(r, out); }
};

// ---- Maps and sets --------------------------------------------------------

namespace detail {

// Map-like M: key_type, mapped_type, emplace_hint. Duplicate keys are rejected.
template <class M>
struct MapCodec {
  using K = typename M::key_type;
  using V = typename M::mapped_type;
  static constexpr size_t min_bytes() { return 4; }
  static void encode(Writer& w, const M& map) {
    if (!w.write_count(map.size(), &type_name<M>)) return;
    for (const auto& [key, value] : map) {
      w.write(key);
      w.write(value);
    }
  }
  static bool decode(Reader& r, M& out) {
    return r.nested([&] {
      uint32_t count;
      size_t entry_bytes = min_encoded_bytes<K>() + min_encoded_bytes<V>();
      if (!r.read_count(count, entry_bytes, &type_name<M>)) return false;
      out.clear();
      if constexpr (requires { out.reserve(count); }) out.reserve(count);
      for (uint32_t i = 0; i < count; ++i) {
        K key{};
        V value{};
        if (!r.read(key) || !r.read(value)) return false;
        size_t before = out.size();
        out.emplace_hint(out.end(), std::move(key), std::move(value));
        if (out.size() == before) return r.fail("duplicate key in " + type_name<M>());
      }
      return true;
    });
  }
};

// Set-like S: key_type, emplace_hint. Duplicate keys are rejected.
template <class S>
struct SetCodec {
  using K = typename S::key_type;
  static constexpr size_t min_bytes() { return 4; }
  static void encode(Writer& w, const S& set) {
    if (!w.write_count(set.size(), &type_name<S>)) return;
    for (const K& key : set)
      w.write(key);
  }
  static bool decode(Reader& r, S& out) {
    return r.nested([&] {
      uint32_t count;
      if (!r.read_count(count, min_encoded_bytes<K>(), &type_name<S>)) return false;
      out.clear();
      if constexpr (requires { out.reserve(count); }) out.reserve(count);
      for (uint32_t i = 0; i < count; ++i) {
        K key{};
        if (!r.read(key)) return false;
        size_t before = out.size();
        out.emplace_hint(out.end(), std::move(key));
        if (out.size() == before) return r.fail("duplicate key in " + type_name<S>());
      }
      return true;
    });
  }
};

template <class K, class V>
std::string map_name(std::string_view kind) {
  return std::string(kind) + "<" + type_name<K>() + "," + type_name<V>() + ">";
}

}  // namespace detail

template <class K, class V, class C, class A>
requires Codable<K> && Codable<V>
struct Codec<std::map<K, V, C, A>> : detail::MapCodec<std::map<K, V, C, A>> {
  static std::string name() { return detail::map_name<K, V>("map"); }
};

template <class K, class V, class H, class E, class A>
requires Codable<K> && Codable<V>
struct Codec<std::unordered_map<K, V, H, E, A>>
    : detail::MapCodec<std::unordered_map<K, V, H, E, A>> {
  static std::string name() { return detail::map_name<K, V>("unordered_map"); }
};

template <class K, class V, class H, class E, class A>
requires Codable<K> && Codable<V>
struct Codec<absl::flat_hash_map<K, V, H, E, A>>
    : detail::MapCodec<absl::flat_hash_map<K, V, H, E, A>> {
  static std::string name() { return detail::map_name<K, V>("flat_hash_map"); }
};

template <class K, class C, class A>
requires Codable<K>
struct Codec<std::set<K, C, A>> : detail::SetCodec<std::set<K, C, A>> {
  static std::string name() { return "set<" + type_name<K>() + ">"; }
};

template <class K, class H, class E, class A>
requires Codable<K>
struct Codec<std::unordered_set<K, H, E, A>> : detail::SetCodec<std::unordered_set<K, H, E, A>> {
  static std::string name() { return "unordered_set<" + type_name<K>() + ">"; }
};

template <class K, class H, class E, class A>
requires Codable<K>
struct Codec<absl::flat_hash_set<K, H, E, A>> : detail::SetCodec<absl::flat_hash_set<K, H, E, A>> {
  static std::string name() { return "flat_hash_set<" + type_name<K>() + ">"; }
};

// ---- Optional, pair, tuple, StatusOr --------------------------------------

template <class T>
requires Codable<T>
struct Codec<std::optional<T>> {
  static constexpr size_t min_bytes() { return 1; }
  static std::string name() { return "optional<" + type_name<T>() + ">"; }
  static void encode(Writer& w, const std::optional<T>& value) {
    w.write(value.has_value());
    if (value) w.write(*value);
  }
  static bool decode(Reader& r, std::optional<T>& out) {
    bool present;
    if (!r.read(present)) return false;
    if (!present) {
      out.reset();
      return true;
    }
    out.emplace();
    return r.read(*out);
  }
};

template <class A, class B>
requires Codable<A> && Codable<B>
struct Codec<std::pair<A, B>> {
  static constexpr size_t min_bytes() { return min_encoded_bytes<A>() + min_encoded_bytes<B>(); }
  static std::string name() { return detail::map_name<A, B>("pair"); }
  static void encode(Writer& w, const std::pair<A, B>& value) {
    w.write(value.first);
    w.write(value.second);
  }
  static bool decode(Reader& r, std::pair<A, B>& out) {
    return r.read(out.first) && r.read(out.second);
  }
};

namespace detail {

// "a,b,c"
template <class... T>
std::string joined_type_names(std::string_view separator) {
  std::string out;
  ((out += type_name<T>(), out += separator), ...);
  if (!out.empty()) out.resize(out.size() - separator.size());
  return out;
}

}  // namespace detail

template <class... T>
requires(Codable<T>&&...) struct Codec<std::tuple<T...>> {
  static constexpr size_t min_bytes() { return (size_t{0} + ... + min_encoded_bytes<T>()); }
  static std::string name() { return "tuple<" + detail::joined_type_names<T...>(",") + ">"; }
  static void encode(Writer& w, const std::tuple<T...>& value) {
    std::apply([&](const T&... e) { encode_values(w, e...); }, value);
  }
  static bool decode(Reader& r, std::tuple<T...>& out) {
    return std::apply([&](T&... e) { return (r.read(e) && ...); }, out);
  }
};

template <class T>
requires Codable<T>
struct Codec<absl::StatusOr<T>> {
  static constexpr size_t min_bytes() { return 1; }
  static std::string name() { return "StatusOr<" + type_name<T>() + ">"; }
  static void encode(Writer& w, const absl::StatusOr<T>& value) {
    w.write(value.status());
    if (value.ok()) w.write(*value);
  }
  static bool decode(Reader& r, absl::StatusOr<T>& out) {
    absl::Status status;
    if (!r.read(status)) return false;
    if (!status.ok()) {
      out = std::move(status);
      return true;
    }
    T value{};
    if (!r.read(value)) return false;
    out = std::move(value);
    return true;
  }
};

// ---- Structs with TROUPE_FIELDS -------------------------------------------

template <class T>
concept HasTroupeFields = requires(T& m, const T& c) {
  m.troupe_fields();
  c.troupe_fields();
};

namespace detail {

template <class Fields>
struct FieldList;
template <class... F>
struct FieldList<std::tuple<F&...>> {
  static constexpr bool kCodable = (Codable<std::remove_const_t<F>> && ...);
  static constexpr size_t min_bytes() {
    return (size_t{0} + ... + min_encoded_bytes<std::remove_const_t<F>>());
  }
};

}  // namespace detail

// Field codability is checked when a struct is encoded or decoded, not in the
// constraint, so that a struct may hold a vector of itself.
template <class T>
requires HasTroupeFields<T>
struct Codec<T> {
  using Fields = detail::FieldList<decltype(std::declval<T&>().troupe_fields())>;
  static constexpr size_t min_bytes() { return Fields::min_bytes(); }
  static std::string name() { return detail::compiler_type_name<T>(); }
  static void encode(Writer& w, const T& value) {
    static_assert(Fields::kCodable, "every member named in TROUPE_FIELDS needs a Codec");
    std::apply([&](const auto&... field) { encode_values(w, field...); }, value.troupe_fields());
  }
  static bool decode(Reader& r, T& out) {
    static_assert(Fields::kCodable, "every member named in TROUPE_FIELDS needs a Codec");
    return std::apply([&](auto&... field) { return (r.read(field) && ...); }, out.troupe_fields());
  }
};

// ---- Names and decode_values ----------------------------------------------

template <class T>
std::string type_name() {
  using U = std::remove_cvref_t<T>;
  if constexpr (requires { Codec<U>::name(); }) {
    return Codec<U>::name();
  } else {
    return detail::compiler_type_name<U>();
  }
}

template <class... T>
absl::Status decode_values(Reader& r, T&... values) {
  (void)(r.read(values) && ...);
  if (r.ok() && r.remaining() != 0) {
    r.fail(std::to_string(r.remaining()) + " trailing bytes after (" +
           detail::joined_type_names<T...>(", ") + ")");
  }
  return r.status();
}

}  // namespace troupe
