// A stand-in for the NVIDIA driver's NVML library (libnvidia-ml.so.1): the
// few calls gpu_inventory() makes, answering for three devices - two H100s
// and an A10 - so that the inventory is tested on machines without a GPU.
// FAKE_NVML_INIT_ERROR=<code> makes nvmlInit_v2 fail with that code, as a
// machine whose driver is not loaded does (9: NVML_ERROR_DRIVER_NOT_LOADED).
#include <cstdlib>
#include <cstring>

namespace {

struct Device {
  const char* name;
  unsigned long long memory;
  const char* uuid;
};

// Memory as NVML reports these models' totals.
constexpr unsigned long long kMiB = 1024ull * 1024;
const Device kDevices[] = {
    {"NVIDIA H100 80GB HBM3", 81559 * kMiB, "GPU-5c3b8a0e-1b4b-6a5f-1e7f-2f0a9c1e7d3b"},
    {"NVIDIA H100 80GB HBM3", 81559 * kMiB, "GPU-5c3b9f11-22aa-4c1d-9e0b-7d1c2a3b4c5d"},
    {"NVIDIA A10", 23028 * kMiB, "GPU-a10a10a1-0000-4000-8000-00000000a10a"},
};
constexpr unsigned kCount = sizeof(kDevices) / sizeof(kDevices[0]);

bool initialised = false;

int copy(const char* text, char* out, unsigned length) {
  if (std::strlen(text) + 1 > length) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::strcpy(out, text);
  return 0;
}

}  // namespace

struct nvmlDevice_st {
  unsigned index;
};
struct nvmlMemory_st {
  unsigned long long total, free, used;
};

namespace {
nvmlDevice_st handles[kCount] = {{0}, {1}, {2}};
}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  if (const char* code = std::getenv("FAKE_NVML_INIT_ERROR")) return std::atoi(code);
  initialised = true;
  return 0;
}

__attribute__((visibility("default"))) int nvmlShutdown() {
  initialised = false;
  return 0;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(int code) {
  return code == 9 ? "Driver Not Loaded" : "Unknown Error";
}

__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialised) return 1;  // NVML_ERROR_UNINITIALIZED
  *count = kCount;
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                         nvmlDevice_st** device) {
  if (!initialised) return 1;
  if (index >= kCount) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &handles[index];
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetName(nvmlDevice_st* device, char* name,
                                                             unsigned length) {
  return copy(kDevices[device->index].name, name, length);
}

__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(nvmlDevice_st* device,
                                                                   nvmlMemory_st* memory) {
  memory->total = kDevices[device->index].memory;
  memory->free = memory->total;
  memory->used = 0;
  return 0;
}

__attribute__((visibility("default"))) int nvmlDeviceGetUUID(nvmlDevice_st* device, char* uuid,
                                                             unsigned length) {
  return copy(kDevices[device->index].uuid, uuid, length);
}

}  // extern "C"
