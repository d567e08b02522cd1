#include "checkpoint/checksum.h"

#include <xxhash.h>

namespace troupe::checkpoint {

struct Xxh64::State {
  XXH64_state_t* s = XXH64_createState();
  ~State() { XXH64_freeState(s); }
};

uint64_t xxh64(const void* data, size_t n) {
  return XXH64(data, n, 0);
}

Xxh64::Xxh64() : state_(std::make_unique<State>()) {
  XXH64_reset(state_->s, 0);
}

Xxh64::~Xxh64() = default;

void Xxh64::update(const void* data, size_t n) {
  XXH64_update(state_->s, data, n);
}

uint64_t Xxh64::digest() const {
  return XXH64_digest(state_->s);
}

}  // namespace troupe::checkpoint
