// stream_copy(): a copy whose stores go around the caches, for blocks too
// large to be read again from them. A plain copy reads each destination line
// before writing it (the store's read for ownership); a streaming one does
// not, so a copy bound by memory bandwidth moves a third fewer bytes.
#pragma once

#include <cstddef>

namespace troupe::transport::detail {

// Blocks from this size up are copied with streaming stores (where the CPU
// has them) by copy_block(): larger than a core's L2, so the destination
// would be written back to memory before anyone reads it anyway.
inline constexpr size_t kStreamCopyBytes = size_t{4} << 20;

// Copies `n` bytes from `src` to `dst` (not overlapping) with non-temporal
// stores, and fences them: once it returns, the bytes are visible to other
// cores as after memcpy. Without streaming stores (not x86-64), a memcpy.
void stream_copy(void* dst, const void* src, size_t n);

// stream_copy() for blocks of kStreamCopyBytes and up, memcpy below.
void copy_block(void* dst, const void* src, size_t n);

}  // namespace troupe::transport::detail
