// Reduction kernels for collectives: elementwise dst = op(dst, src) over
// buffers of one DType, on the CPU.
//
// Arithmetic is done in fp32. For kFloat16 and kBFloat16 each element is
// widened to fp32, combined, and rounded back (to nearest, ties to even):
// reduce_into rounds once per call, reduce_many once for all its sources.
//
// kAvg reduces as a sum; the caller divides at the end with scale(), e.g.
// scale(type, data, count, 1.0f / world_size), so that every rank rounds the
// same sum the same way.
//
// kMax, kMin: if either operand is a NaN the result is a NaN (unlike
// std::fmax/fmin, which drop it), so a NaN gradient on any rank is seen on
// all. When the operands compare equal (+0 and -0), the result is src's.
//
// Results are deterministic: the same inputs, in the same order, give the
// same bits on every call and every machine with IEEE fp32 and round-to-
// nearest (the default; the kernels assume it is in force).
//
// count is in elements. Pointers need only the alignment of their element
// type (2 or 4 bytes). REQUIRES: no source overlaps dst.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "transport/collectives/dtype.h"

namespace troupe::transport {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
std::string_view to_string(ReduceOp op);  // "sum", "avg", "max", "min"

// dst[i] = op(dst[i], src[i]) for i in [0, count).
void reduce_into(DType type, ReduceOp op, void* dst, const void* src, size_t count);

// dst[i] = op(...op(op(dst[i], srcs[0][i]), srcs[1][i])..., srcs[nsrcs-1][i]),
// accumulated in fp32 and rounded to `type` once at the end. For kFloat32 the
// result equals reduce_into applied to each source in order; for the 16-bit
// types it is at least as accurate. nsrcs == 0 leaves dst unchanged.
void reduce_many(DType type, ReduceOp op, void* dst, const void* const* srcs, size_t nsrcs,
                 size_t count);

// data[i] = data[i] * factor, in fp32, rounded once to `type`.
void scale(DType type, void* data, size_t count, float factor);

}  // namespace troupe::transport
