// xxh64 (seed 0) of the bytes a checkpoint writes: each entry of an owner's
// file is checked against it on load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace troupe::checkpoint {

uint64_t xxh64(const void* data, size_t n);

// The same over bytes that come in pieces.
class Xxh64 {
 public:
  Xxh64();
  ~Xxh64();
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace troupe::checkpoint
