#include "nn/memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nn/device_backend.h"

namespace troupe::nn {
namespace {

int64_t round_up(int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (bytes >= (int64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (bytes >= (int64_t{1} << 10)) return absl::StrFormat("%.2f KiB", b / (1 << 10));
  return absl::StrCat(bytes, " B");
}

const char* to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParameters:
      return "parameters";
    case MemoryCategory::kGradients:
      return "gradients";
    case MemoryCategory::kOptimizerState:
      return "optimizer_state";
    case MemoryCategory::kActivations:
      return "activations";
    case MemoryCategory::kGatherBuffers:
      return "gather_buffers";
    case MemoryCategory::kOther:
      return "other";
  }
  return "unknown";
}

MemoryTracker& MemoryTracker::global() {
  static MemoryTracker* tracker = new MemoryTracker();  // never destroyed: freed at exit too
  return *tracker;
}

void MemoryTracker::Counter::add(int64_t bytes) {
  const int64_t now = live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void MemoryTracker::on_allocate(DeviceKind device, MemoryCategory category, int64_t bytes) {
  counters_[static_cast<int>(device)][static_cast<int>(category)].add(bytes);
  totals_[static_cast<int>(device)].add(bytes);
}

void MemoryTracker::on_free(DeviceKind device, MemoryCategory category, int64_t bytes) {
  counters_[static_cast<int>(device)][static_cast<int>(category)].add(-bytes);
  totals_[static_cast<int>(device)].add(-bytes);
}

int64_t MemoryTracker::live_bytes(MemoryCategory category, DeviceKind device) const {
  return counters_[static_cast<int>(device)][static_cast<int>(category)].live.load();
}

int64_t MemoryTracker::peak_bytes(MemoryCategory category, DeviceKind device) const {
  return counters_[static_cast<int>(device)][static_cast<int>(category)].peak.load();
}

int64_t MemoryTracker::total_live_bytes(DeviceKind device) const {
  return totals_[static_cast<int>(device)].live.load();
}

int64_t MemoryTracker::total_peak_bytes(DeviceKind device) const {
  return totals_[static_cast<int>(device)].peak.load();
}

void MemoryTracker::reset_peak() {
  for (auto& device : counters_) {
    for (Counter& counter : device)
      counter.reset_peak();
  }
  for (Counter& total : totals_)
    total.reset_peak();
}

std::string MemoryTracker::summary() const {
  std::string out;
  for (int d = 0; d < kNumDeviceKinds; ++d) {
    const auto device = static_cast<DeviceKind>(d);
    if (total_peak_bytes(device) == 0 && d != 0) continue;  // the CPU line always
    absl::StrAppend(&out, out.empty() ? "" : "\n", to_string(device), ": live ",
                    format_bytes(total_live_bytes(device)), " (peak ",
                    format_bytes(total_peak_bytes(device)), ")");
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      const auto category = static_cast<MemoryCategory>(c);
      absl::StrAppend(&out, c == 0 ? ": " : ", ", to_string(category), " ",
                      format_bytes(live_bytes(category, device)), " (peak ",
                      format_bytes(peak_bytes(category, device)), ")");
    }
  }
  return out;
}

absl::StatusOr<void*> allocate(Device device, MemoryCategory category, int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError(absl::StrCat("allocate: ", bytes, " bytes"));
  if (bytes == 0) return nullptr;
  absl::StatusOr<DeviceBackend*> backend = nn::backend(device.kind);
  if (!backend.ok()) return backend.status();
  const int64_t rounded = round_up(bytes);
  absl::StatusOr<void*> data = (*backend)->allocate(device.index, rounded);
  if (!data.ok()) {
    return absl::Status(data.status().code(),
                        absl::StrCat(data.status().message(), " (", to_string(category),
                                     "; held now: ", MemoryTracker::global().summary(), ")"));
  }
  MemoryTracker::global().on_allocate(device.kind, category, rounded);
  return *data;
}

void deallocate(Device device, MemoryCategory category, void* data, int64_t bytes) {
  if (data == nullptr) return;
  absl::StatusOr<DeviceBackend*> backend = nn::backend(device.kind);
  if (backend.ok()) (*backend)->deallocate(device.index, data);  // it allocated, so it is there
  MemoryTracker::global().on_free(device.kind, category, round_up(bytes));
}

absl::Status copy_bytes(void* dst, Device dst_device, const void* src, Device src_device,
                        int64_t bytes) {
  if (bytes <= 0) return absl::OkStatus();
  const DeviceKind kind = dst_device.is_cpu() ? src_device.kind : dst_device.kind;
  absl::StatusOr<DeviceBackend*> backend = nn::backend(kind);
  if (!backend.ok()) return backend.status();
  return (*backend)->copy(dst, dst_device, src, src_device, bytes);
}

absl::Status zero_bytes(void* data, Device device, int64_t bytes) {
  if (bytes <= 0) return absl::OkStatus();
  absl::StatusOr<DeviceBackend*> backend = nn::backend(device.kind);
  if (!backend.ok()) return backend.status();
  return (*backend)->zero(device.index, data, bytes);
}

FloatBuffer& FloatBuffer::operator=(FloatBuffer&& other) noexcept {
  if (this != &other) {
    release();
    category_ = other.category_;
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

absl::Status FloatBuffer::reset(MemoryCategory category, size_t n, bool zero, Device device) {
  release();
  absl::StatusOr<void*> p = allocate(device, category, static_cast<int64_t>(n * sizeof(float)));
  if (!p.ok()) return p.status();
  category_ = category;
  device_ = device;
  data_ = static_cast<float*>(*p);
  size_ = n;
  if (n > 0 && zero) {
    if (device.is_cpu()) {
      std::memset(data_, 0, n * sizeof(float));
    } else if (absl::Status s = zero_bytes(data_, device, static_cast<int64_t>(bytes())); !s.ok()) {
      release();
      return s;
    }
  }
  return absl::OkStatus();
}

void FloatBuffer::release() {
  if (data_ == nullptr) return;
  deallocate(device_, category_, data_, static_cast<int64_t>(size_ * sizeof(float)));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace troupe::nn
