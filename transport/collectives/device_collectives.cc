#include "transport/collectives/device_collectives.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace troupe::transport {
namespace {

struct Loaded {
  absl::Status status;
  DeviceCollectives* backend = nullptr;
};

#ifdef TROUPE_HAVE_NCCL
// The folder of the library this function is in (libtroupe_transport), with
// a trailing '/', or "".
std::string own_folder() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<const void*>(&own_folder), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}
#endif

Loaded load() {
#ifndef TROUPE_HAVE_NCCL
  return {absl::FailedPreconditionError(
              "this build of troupe has no NCCL support (configure it where the CUDA toolkit and "
              "NCCL are found: docs/collectives.md)"),
          nullptr};
#else
  // Beside libtroupe_transport first (the build tree and an install keep
  // them together), then the loader's search path.
  constexpr const char* kName = "libtroupe_nccl.so";
  const std::string beside = own_folder() + kName;
  void* library = ::dlopen(beside.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why_beside;
  if (library == nullptr) {
    const char* why = ::dlerror();
    why_beside = why != nullptr ? why : "not found";
    library = ::dlopen(kName, RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    const char* why = ::dlerror();
    return {absl::FailedPreconditionError(absl::StrCat(
                "cannot load the NCCL backend ", kName, ": ", why_beside, "; ",
                why != nullptr ? why : "not found",
                " (it needs libnccl.so.2: put NCCL's library folder on LD_LIBRARY_PATH)")),
            nullptr};
  }
  using Entry = DeviceCollectives* (*)(uint32_t);
  auto entry = reinterpret_cast<Entry>(::dlsym(library, "troupe_nccl_device_collectives"));
  DeviceCollectives* backend = entry != nullptr ? entry(kDeviceCollectivesVersion) : nullptr;
  if (backend == nullptr) {
    return {absl::FailedPreconditionError(
                absl::StrCat(kName, " has no troupe_nccl_device_collectives of interface version ",
                             kDeviceCollectivesVersion, ": a library of another build of troupe")),
            nullptr};
  }
  return {absl::OkStatus(), backend};  // the library stays loaded for the life of the process
#endif
}

std::once_flag g_once;
std::atomic<const Loaded*> g_loaded{nullptr};  // never destroyed once set

}  // namespace

absl::StatusOr<DeviceCollectives*> device_collectives() {
  std::call_once(g_once, [] { g_loaded.store(new Loaded(load())); });
  const Loaded& loaded = *g_loaded.load();
  if (!loaded.status.ok()) return loaded.status;
  return loaded.backend;
}

bool device_collectives_loaded() {
  const Loaded* loaded = g_loaded.load();
  return loaded != nullptr && loaded->backend != nullptr;
}

}  // namespace troupe::transport
