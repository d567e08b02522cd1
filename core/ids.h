// Identifiers. An ActorId is unique within a cluster: the node index in the
// high 16 bits and a per-node sequence number in the low 48.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace troupe {

struct ActorId {
  uint64_t value = 0;

  static constexpr int kSequenceBits = 48;
  static ActorId make(uint32_t node, uint64_t sequence) {
    return ActorId{(uint64_t{node} << kSequenceBits) |
                   (sequence & ((uint64_t{1} << kSequenceBits) - 1))};
  }
  uint32_t node() const { return static_cast<uint32_t>(value >> kSequenceBits); }
  uint64_t sequence() const { return value & ((uint64_t{1} << kSequenceBits) - 1); }
  bool valid() const { return value != 0; }

  friend auto operator<=>(const ActorId&, const ActorId&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const ActorId& id) {
    return H::combine(std::move(h), id.value);
  }
};

// "actor-<node>-<sequence>", as shown in logs and errors.
std::string to_string(ActorId id);

// A stable 64-bit id for a string (FNV-1a), used for actor types and methods so
// that every process computes the same ids without coordination.
constexpr uint64_t stable_id(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace troupe
