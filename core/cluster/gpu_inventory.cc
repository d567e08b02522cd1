#include "core/cluster/gpu_inventory.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace troupe::cluster {
namespace {

// The little of NVML's API (nvml.h) used here, declared by hand so that
// nothing of CUDA is needed to build.
using NvmlReturn = int;  // nvmlReturn_t; 0 is NVML_SUCCESS
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDeviceStruct;
using NvmlDevice = NvmlDeviceStruct*;  // nvmlDevice_t
struct NvmlMemory {                    // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// NVML_DEVICE_NAME_V2_BUFFER_SIZE and NVML_DEVICE_UUID_V2_BUFFER_SIZE.
constexpr unsigned kNvmlNameBytes = 96;
constexpr unsigned kNvmlUuidBytes = 96;

using NvmlInit = NvmlReturn (*)();
using NvmlShutdown = NvmlReturn (*)();
using NvmlGetCount = NvmlReturn (*)(unsigned*);
using NvmlGetHandle = NvmlReturn (*)(unsigned, NvmlDevice*);
using NvmlGetName = NvmlReturn (*)(NvmlDevice, char*, unsigned);
using NvmlGetMemory = NvmlReturn (*)(NvmlDevice, NvmlMemory*);
using NvmlGetUuid = NvmlReturn (*)(NvmlDevice, char*, unsigned);
using NvmlErrorString = const char* (*)(NvmlReturn);

constexpr char kUnknownName[] = "GPU";

// NVML's functions from a dlopen()ed library, closed when this goes.
class Nvml {
 public:
  explicit Nvml(const std::string& library) : library_(library) {
    dlerror();  // clear any earlier error
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* error = dlerror();
      note_ = absl::StrCat("no NVML (", error != nullptr ? error : library, ")");
      return;
    }
    if (!find("nvmlInit_v2", init_) || !find("nvmlShutdown", shutdown_) ||
        !find("nvmlDeviceGetCount_v2", count_) ||
        !find("nvmlDeviceGetHandleByIndex_v2", handle_of_) || !find("nvmlDeviceGetName", name_) ||
        !find("nvmlDeviceGetMemoryInfo", memory_) || !find("nvmlDeviceGetUUID", uuid_)) {
      return;
    }
    error_string_ = reinterpret_cast<NvmlErrorString>(dlsym(handle_, "nvmlErrorString"));
    if (NvmlReturn r = init_(); r != kNvmlSuccess) {
      note_ = absl::StrCat("nvmlInit_v2 failed: ", error(r));
      return;
    }
    initialised_ = true;
  }
  ~Nvml() {
    if (initialised_) shutdown_();
    if (handle_ != nullptr) dlclose(handle_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  bool ready() const { return initialised_; }
  // Why it is not ready.
  const std::string& note() const { return note_; }

  // Every device NVML sees, numbered in its order; an error says which call
  // failed and why.
  bool devices(std::vector<GpuDevice>* out, std::string* why) const {
    unsigned count = 0;
    if (NvmlReturn r = count_(&count); r != kNvmlSuccess) {
      *why = absl::StrCat("nvmlDeviceGetCount_v2 failed: ", error(r));
      return false;
    }
    for (unsigned i = 0; i < count; ++i) {
      NvmlDevice device = nullptr;
      if (NvmlReturn r = handle_of_(i, &device); r != kNvmlSuccess) {
        *why = absl::StrCat("nvmlDeviceGetHandleByIndex_v2(", i, ") failed: ", error(r));
        return false;
      }
      GpuDevice d;
      d.index = static_cast<int32_t>(i);
      char text[kNvmlNameBytes > kNvmlUuidBytes ? kNvmlNameBytes : kNvmlUuidBytes] = {};
      d.name = name_(device, text, kNvmlNameBytes) == kNvmlSuccess && text[0] != '\0'
                   ? std::string(text, strnlen(text, kNvmlNameBytes))
                   : kUnknownName;
      NvmlMemory memory{};
      if (memory_(device, &memory) == kNvmlSuccess) {
        d.memory_bytes = static_cast<int64_t>(memory.total);
      }
      text[0] = '\0';
      if (uuid_(device, text, kNvmlUuidBytes) == kNvmlSuccess) {
        d.uuid = std::string(text, strnlen(text, kNvmlUuidBytes));
      }
      out->push_back(std::move(d));
    }
    return true;
  }

 private:
  template <class F>
  bool find(const char* symbol, F& fn) {
    fn = reinterpret_cast<F>(dlsym(handle_, symbol));
    if (fn == nullptr) {
      note_ = absl::StrCat(library_, " has no ", symbol, " (not NVML, or an NVML too old)");
    }
    return fn != nullptr;
  }
  std::string error(NvmlReturn r) const {
    const char* text = error_string_ != nullptr ? error_string_(r) : nullptr;
    return absl::StrCat(text != nullptr ? text : "error", " (NVML code ", r, ")");
  }

  const std::string library_;
  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string note_;
  NvmlInit init_ = nullptr;
  NvmlShutdown shutdown_ = nullptr;
  NvmlGetCount count_ = nullptr;
  NvmlGetHandle handle_of_ = nullptr;
  NvmlGetName name_ = nullptr;
  NvmlGetMemory memory_ = nullptr;
  NvmlGetUuid uuid_ = nullptr;
  NvmlErrorString error_string_ = nullptr;
};

// The device `entry` of CUDA_VISIBLE_DEVICES names among `all`, or -1.
int find_visible(const std::vector<GpuDevice>& all, absl::string_view entry) {
  if (entry.empty()) return -1;
  if (absl::StartsWithIgnoreCase(entry, "GPU-")) {
    int found = -1;
    for (size_t i = 0; i < all.size(); ++i) {
      if (!absl::StartsWithIgnoreCase(all[i].uuid, entry)) continue;
      if (found >= 0) return -1;  // ambiguous
      found = static_cast<int>(i);
    }
    return found;
  }
  for (char c : entry) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int index = -1;
  if (!absl::SimpleAtoi(entry, &index) || index < 0 || static_cast<size_t>(index) >= all.size()) {
    return -1;
  }
  return index;
}

std::string gib(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

std::vector<GpuDevice> cuda_visible(const std::vector<GpuDevice>& all,
                                    const char* cuda_visible_devices) {
  if (cuda_visible_devices == nullptr) return all;
  std::vector<GpuDevice> visible;
  std::set<int> taken;
  if (absl::string_view(cuda_visible_devices).empty()) return visible;
  for (absl::string_view entry : absl::StrSplit(cuda_visible_devices, ',')) {
    int found = find_visible(all, absl::StripAsciiWhitespace(entry));
    if (found < 0 || !taken.insert(found).second) break;
    GpuDevice d = all[static_cast<size_t>(found)];
    d.index = static_cast<int32_t>(visible.size());
    visible.push_back(std::move(d));
  }
  return visible;
}

GpuInventory gpu_inventory(const std::string& nvml_library, const char* cuda_visible_devices) {
  GpuInventory inventory;
  Nvml nvml(nvml_library);
  if (!nvml.ready()) {
    inventory.note = nvml.note();
    return inventory;
  }
  std::vector<GpuDevice> all;
  if (!nvml.devices(&all, &inventory.note)) return inventory;
  if (all.empty()) {
    inventory.note = "NVML sees no devices";
    return inventory;
  }
  inventory.devices = cuda_visible(all, cuda_visible_devices);
  if (inventory.devices.empty()) {
    inventory.note = absl::StrCat("CUDA_VISIBLE_DEVICES='", cuda_visible_devices,
                                  "' leaves none of the ", all.size(), " NVML sees");
  }
  return inventory;
}

GpuInventory gpu_inventory() {
  const char* library = std::getenv("TROUPE_NVML_LIBRARY");
  return gpu_inventory(library != nullptr && library[0] != '\0' ? library : kNvmlLibrary,
                       std::getenv("CUDA_VISIBLE_DEVICES"));
}

std::vector<GpuDevice> gpus_for_count(const std::vector<GpuDevice>& found, int count) {
  std::vector<GpuDevice> out;
  for (int i = 0; i < count; ++i) {
    GpuDevice d;
    if (static_cast<size_t>(i) < found.size()) {
      d = found[static_cast<size_t>(i)];
    } else {
      d.name = kUnknownName;
    }
    d.index = i;
    out.push_back(std::move(d));
  }
  return out;
}

std::string describe(const GpuDevice& device) {
  return absl::StrCat("GPU ", device.index, ": ", device.name, ", ",
                      device.memory_bytes > 0 ? gib(device.memory_bytes) : "memory unknown");
}

std::string describe(const GpuInventory& inventory) {
  if (inventory.devices.empty()) return absl::StrCat("no GPUs (", inventory.note, ")");
  std::string out;
  const std::vector<GpuDevice>& d = inventory.devices;
  for (size_t i = 0; i < d.size();) {
    size_t j = i;
    while (j < d.size() && d[j].name == d[i].name && d[j].memory_bytes == d[i].memory_bytes)
      ++j;
    absl::StrAppend(&out, out.empty() ? "" : ", ", j - i, " x ", d[i].name, " (",
                    d[i].memory_bytes > 0 ? gib(d[i].memory_bytes) : "memory unknown", ")");
    i = j;
  }
  return out;
}

}  // namespace troupe::cluster
