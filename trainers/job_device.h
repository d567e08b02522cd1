// Which device a training job's stages compute on, and what each asks of the cluster for it
// (docs/gpu.md). A stage on CUDA holds a CPU and a GPU of its worker; its shard and loader, in
// the same bundle, use the stage's GPU. A stage's tensor-parallel slices share a bundle, so
// their GPUs are on one node.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/cluster.h"
#include "core/cluster/gpu_inventory.h"
#include "core/cluster/protocol.h"
#include "nn/device.h"
#include "trainers/config.h"

namespace troupe::trainers {

// The device of a job whose config says `choice`, on a cluster of `nodes` (ClusterStatus::nodes):
// cpu or cuda as asked; for kAuto, cuda when there is a worker and every live worker that takes
// work offers a GPU, else cpu. FailedPrecondition for cuda when a worker offers none, naming it
// and what to do.
[[nodiscard]] absl::StatusOr<nn::DeviceKind> resolve_device(
    DeviceChoice choice, const std::vector<cluster::NodeStatus>& nodes);

// `config` with `device` resolved on `cluster` (never kAuto after it).
[[nodiscard]] absl::StatusOr<TrainConfig> with_device_resolved(Cluster& cluster,
                                                               TrainConfig config);

// The resolved config's device. REQUIRES: config.device is not kAuto.
nn::DeviceKind job_device(const TrainConfig& config);

// What a bundle of `stages` stages (a tp group, or one stage) asks for: "CPU=2", or with CUDA
// "CPU=2,GPU=2".
std::string stage_bundle(const TrainConfig& config, int stages);
// What one stage holds of its bundle: "CPU=1" or "CPU=1,GPU=1".
inline std::string stage_resources(const TrainConfig& config) {
  return stage_bundle(config, 1);
}
// What a stage needs of a node, for the words of an error: "one CPU" or "one CPU and one GPU".
std::string stage_needs(const TrainConfig& config, int stages);

// How `troupe train --local N` lays this machine's GPUs over its workers (as torchrun gives each
// local rank a device): with at least one GPU a worker each, worker i gets its own block of
// them (G / N each, whole); with fewer, the workers share them round-robin, one each. A worker
// sees only its own (CUDA_VISIBLE_DEVICES, by UUID where known) and offers them as GPU=k. No
// GPUs, or "device": "cpu": the workers offer none.
struct LocalGpuPlan {
  std::vector<std::string> resources;        // each worker's --resources
  std::vector<std::string> visible_devices;  // each worker's CUDA_VISIBLE_DEVICES; empty: none
  std::string summary;  // "each with its own GPU (2 x NVIDIA H100 80GB HBM3)", or empty
};
LocalGpuPlan plan_local_gpus(const std::vector<cluster::GpuDevice>& gpus, int workers,
                             int cpus_per_worker, DeviceChoice device);

}  // namespace troupe::trainers
