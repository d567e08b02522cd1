#include "trainers/job_device.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cluster/cluster.h"
#include "core/cluster/detail/resources.h"

namespace troupe::trainers {
namespace {

// Workers a job can be placed on: alive, hosting, not drained.
bool takes_work(const cluster::NodeStatus& n) {
  return n.state == cluster::NodeState::kAlive && n.info.kind == cluster::NodeKind::kWorker &&
         n.ready && !n.draining;
}

double gpus_of(const cluster::NodeStatus& n) {
  absl::StatusOr<cluster::Resources> r = cluster::Resources::parse(n.info.resources);
  return r.ok() ? r->get(cluster::kGpu) : 0;
}

}  // namespace

absl::StatusOr<nn::DeviceKind> resolve_device(DeviceChoice choice,
                                              const std::vector<cluster::NodeStatus>& nodes) {
  if (choice == DeviceChoice::kCpu) return nn::DeviceKind::kCpu;
  int workers = 0;
  const cluster::NodeStatus* without = nullptr;
  for (const cluster::NodeStatus& n : nodes) {
    if (!takes_work(n)) continue;
    ++workers;
    if (without == nullptr && gpus_of(n) < 1) without = &n;
  }
  if (choice == DeviceChoice::kAuto) {
    return workers > 0 && without == nullptr ? nn::DeviceKind::kCuda : nn::DeviceKind::kCpu;
  }
  if (workers == 0) {
    return absl::FailedPreconditionError(
        "device \"cuda\": the cluster has no worker to compute on");
  }
  if (without != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device \"cuda\": worker node ", without->info.index, " (", without->info.name,
        ") offers no GPU (its resources: ", without->info.resources,
        "); start it where NVML sees a GPU or with --resources GPU=N, drain it, or set "
        "\"device\": \"cpu\""));
  }
  return nn::DeviceKind::kCuda;
}

absl::StatusOr<TrainConfig> with_device_resolved(Cluster& cluster, TrainConfig config) {
  if (config.device == DeviceChoice::kCpu) return config;
  absl::StatusOr<cluster::ClusterStatus> status = cluster.status();
  if (!status.ok()) return status.status();
  absl::StatusOr<nn::DeviceKind> device = resolve_device(config.device, status->nodes);
  if (!device.ok()) return device.status();
  config.device = *device == nn::DeviceKind::kCuda ? DeviceChoice::kCuda : DeviceChoice::kCpu;
  return config;
}

nn::DeviceKind job_device(const TrainConfig& config) {
  return config.device == DeviceChoice::kCuda ? nn::DeviceKind::kCuda : nn::DeviceKind::kCpu;
}

std::string stage_bundle(const TrainConfig& config, int stages) {
  if (job_device(config) == nn::DeviceKind::kCuda) {
    return absl::StrCat("CPU=", stages, ",GPU=", stages);
  }
  return absl::StrCat("CPU=", stages);
}

std::string stage_needs(const TrainConfig& config, int stages) {
  const std::string cpus = stages == 1 ? "one CPU" : absl::StrCat(stages, " CPUs");
  if (job_device(config) != nn::DeviceKind::kCuda) return cpus;
  return absl::StrCat(cpus, " and ", stages == 1 ? "one GPU" : absl::StrCat(stages, " GPUs"));
}

LocalGpuPlan plan_local_gpus(const std::vector<cluster::GpuDevice>& gpus, int workers,
                             int cpus_per_worker, DeviceChoice device) {
  LocalGpuPlan plan;
  const std::string cpus = absl::StrCat("CPU=", cpus_per_worker);
  const auto G = static_cast<int>(gpus.size());
  if (G == 0 || device == DeviceChoice::kCpu || workers < 1) {
    plan.resources.assign(static_cast<size_t>(std::max(workers, 0)), cpus);
    plan.visible_devices.assign(plan.resources.size(), "");
    return plan;
  }
  auto id = [&](int g) {
    const cluster::GpuDevice& d = gpus[static_cast<size_t>(g)];
    return d.uuid.empty() ? absl::StrCat(d.index) : d.uuid;
  };
  const int each = G >= workers ? G / workers : 1;
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> mine;
    for (int k = 0; k < each; ++k)
      mine.push_back(id(G >= workers ? i * each + k : i % G));
    plan.visible_devices.push_back(absl::StrJoin(mine, ","));
    plan.resources.push_back(absl::StrCat(cpus, ",GPU=", each));
  }
  const std::string kinds = cluster::describe(cluster::GpuInventory{.devices = gpus});
  if (G >= workers) {
    plan.summary = each == 1 ? absl::StrCat("each with its own GPU (", kinds, ")")
                             : absl::StrCat("each with ", each, " GPUs of its own (", kinds, ")");
  } else {
    plan.summary = absl::StrCat("sharing ", G, G == 1 ? " GPU" : " GPUs", " (", kinds, ")");
  }
  return plan;
}

}  // namespace troupe::trainers
