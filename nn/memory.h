// Where tensor memory lives, and how much of it each part of training holds.
//
// Every allocation nn makes goes through allocate() below, which counts it in
// MemoryTracker::global() under the category the caller names: parameters,
// gradients, optimizer state, activations, or other. The tracker keeps the
// bytes live and the peak, per category and in total, per device, so that a
// ZeRO stage or an activation-checkpointing choice shows up as numbers.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nn/device.h"

namespace troupe::nn {

enum class MemoryCategory : uint8_t {
  kParameters,
  kGradients,
  kOptimizerState,
  kActivations,
  kGatherBuffers,  // ZeRO: parameters gathered for a layer's use, gradient buckets in flight
  kOther,
};
inline constexpr int kNumMemoryCategories = 6;
// "parameters", "gradients", "optimizer_state", "activations", "gather_buffers", "other"
const char* to_string(MemoryCategory category);

// "1.50 GiB", "12.00 MiB", "640.00 KiB", "12 B".
std::string format_bytes(int64_t bytes);

// Bytes live and peak, per device kind and category and per kind in total (the CUDA devices of a
// process are counted together).
// Thread-safe: every method may be called from any thread at any time (the
// counters are atomics; a reading is a snapshot of each counter, not of all
// of them at one instant).
class MemoryTracker {
 public:
  // The tracker nn's allocations are counted in.
  static MemoryTracker& global();

  MemoryTracker() = default;
  MemoryTracker(const MemoryTracker&) = delete;
  MemoryTracker& operator=(const MemoryTracker&) = delete;

  // Counts `bytes` (>= 0) allocated or freed.
  void on_allocate(DeviceKind device, MemoryCategory category, int64_t bytes);
  void on_free(DeviceKind device, MemoryCategory category, int64_t bytes);

  int64_t live_bytes(MemoryCategory category, DeviceKind device = DeviceKind::kCpu) const;
  int64_t peak_bytes(MemoryCategory category, DeviceKind device = DeviceKind::kCpu) const;
  int64_t total_live_bytes(DeviceKind device = DeviceKind::kCpu) const;
  // The peak of the total, which is at most the sum of the categories' peaks.
  int64_t total_peak_bytes(DeviceKind device = DeviceKind::kCpu) const;

  // Sets every peak to the bytes live now (e.g. at the start of a step).
  // Allocations racing with it may or may not count towards the new peaks.
  void reset_peak();

  // One line per device with any memory ever counted, e.g.
  //   cpu: live 1.50 GiB (peak 2.00 GiB): parameters 512.00 MiB (peak 512.00 MiB), ...
  std::string summary() const;

 private:
  struct Counter {
    std::atomic<int64_t> live{0};
    std::atomic<int64_t> peak{0};
    void add(int64_t bytes);
    void reset_peak() { peak.store(live.load(std::memory_order_relaxed)); }
  };
  std::array<std::array<Counter, kNumMemoryCategories>, kNumDeviceKinds> counters_;
  std::array<Counter, kNumDeviceKinds> totals_;
};

// Alignment of every allocation, in bytes (a cache line; an AVX-512 vector).
inline constexpr int64_t kAlignment = 64;

// `bytes` (>= 0) of memory on `device`, 64-byte aligned and uninitialised,
// counted in MemoryTracker::global() under `category` as `bytes` rounded up to
// a multiple of 64. Returns nullptr for 0 bytes. ResourceExhausted when the
// memory is not there; FailedPrecondition for kCuda in a build without CUDA or
// on a machine without a GPU (a CUDA device loads the CUDA backend, device_backend.h). The
// caller owns the memory and returns it with deallocate(), passing the same device, category
// and bytes.
[[nodiscard]] absl::StatusOr<void*> allocate(Device device, MemoryCategory category, int64_t bytes);
void deallocate(Device device, MemoryCategory category, void* data, int64_t bytes);

// Copies `bytes` from `src` on `src_device` to `dst` on `dst_device` (any of
// cpu<->cuda), complete when it returns. Internal (with a CUDA error's text)
// when the copy fails; FailedPrecondition for CUDA without CUDA. REQUIRES: no
// overlap.
[[nodiscard]] absl::Status copy_bytes(void* dst, Device dst_device, const void* src,
                                      Device src_device, int64_t bytes);

// Sets `bytes` at `data` on `device` to zero.
[[nodiscard]] absl::Status zero_bytes(void* data, Device device, int64_t bytes);

// fp32 memory from allocate() on a device (the CPU unless reset names another), counted under
// its category while held; move-only. data() is null while empty; on a CUDA device it is a
// device pointer, for that device's kernels and copy_bytes.
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(FloatBuffer&& other) noexcept { *this = std::move(other); }
  FloatBuffer& operator=(FloatBuffer&& other) noexcept;
  ~FloatBuffer() { release(); }
  // Replaces the contents by n zeros (n floats left as they are, with zero = false), on
  // `device`. ResourceExhausted without the memory (then empty); FailedPrecondition for a device
  // that is not usable here.
  [[nodiscard]] absl::Status reset(MemoryCategory category, size_t n, bool zero = true,
                                   Device device = Device::cpu());
  void release();
  float* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }
  Device device() const { return device_; }

 private:
  MemoryCategory category_ = MemoryCategory::kOther;
  Device device_ = Device::cpu();
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace troupe::nn
