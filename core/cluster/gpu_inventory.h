// What NVIDIA GPUs this node has, for the "GPU" resource a worker offers.
// Read through NVML, which is loaded (dlopen) when asked and never linked:
// no CUDA runtime, no CUDA context, nothing held on the devices afterwards.
// Never fails: a node without NVML (no driver, a CPU machine) or where NVML
// errs reports an empty inventory and why.
//
// Devices are numbered as CUDA numbers them in this process: NVML's order
// (PCI bus order, which is CUDA's with CUDA_DEVICE_ORDER=PCI_BUS_ID, and on
// a node of one GPU model its default order too), then narrowed and
// renumbered by CUDA_VISIBLE_DEVICES as the CUDA runtime does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/codec.h"

namespace troupe::cluster {

struct GpuDevice {
  int32_t index = 0;         // CUDA's device number in this process
  std::string name;          // "NVIDIA H100 80GB HBM3"; "GPU" when unknown
  int64_t memory_bytes = 0;  // total; 0 when unknown
  std::string uuid;          // "GPU-5c3b8a0e-..."; empty when unknown
  TROUPE_FIELDS(index, name, memory_bytes, uuid);
};

struct GpuInventory {
  std::vector<GpuDevice> devices;
  std::string note;  // why `devices` is empty, when it is
};

// The most GPUs a node may offer (its GPU resource).
inline constexpr int kMaxNodeGpus = 1024;

// The NVML library loaded when none is named: the driver's.
inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

// This node's GPUs: NVML from $TROUPE_NVML_LIBRARY when set (another NVML,
// or a stand-in for tests), else kNvmlLibrary; filtered by this process's
// CUDA_VISIBLE_DEVICES.
GpuInventory gpu_inventory();

// The same from the NVML library at `nvml_library` (a path or a name the
// loader searches), with `cuda_visible_devices` as that variable's value
// (nullptr: unset). A device whose name, memory or UUID NVML cannot tell
// keeps the fields it can ("GPU", 0, ""); one it cannot open makes the whole
// inventory empty, as CUDA's numbering past it would be a guess.
GpuInventory gpu_inventory(const std::string& nvml_library, const char* cuda_visible_devices);

// What CUDA makes of `all` (every device, numbered 0..n-1 in NVML's order)
// under CUDA_VISIBLE_DEVICES = `cuda_visible_devices`, as the CUDA runtime
// reads it: nullptr (unset) keeps every device; otherwise a comma-separated
// list of device numbers or UUIDs - a UUID may be shortened to a prefix that
// names one device, "GPU-5c3b" - whose devices are kept in the list's order
// and renumbered 0, 1, ... An empty value keeps none; an entry that names no
// device (out of range, malformed, an ambiguous prefix, a device already
// listed, a MIG instance) ends the list there, keeping those before it.
// Blanks around entries are ignored. Pure: no NVML, no environment.
std::vector<GpuDevice> cuda_visible(const std::vector<GpuDevice>& all,
                                    const char* cuda_visible_devices);

// The devices a node offering GPU=`count` describes: the first `count` of
// `found`, renumbered 0..count-1 in order, and past its end stand-ins named
// "GPU" of unknown memory (a GPU the operator declares that NVML did not
// show). REQUIRES: count >= 0.
std::vector<GpuDevice> gpus_for_count(const std::vector<GpuDevice>& found, int count);

// "GPU 0: NVIDIA H100 80GB HBM3, 79.6 GiB" ("..., memory unknown" when 0).
std::string describe(const GpuDevice& device);
// "2 x NVIDIA H100 80GB HBM3 (79.6 GiB)", runs of the same model and memory
// joined by ", "; or "no GPUs (<note>)".
std::string describe(const GpuInventory& inventory);

}  // namespace troupe::cluster
