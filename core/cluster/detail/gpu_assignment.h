// GpuAssignment: which of a node's GPUs each actor hosted there holds - the
// device indices gpu_ids() (core/cluster/gpus.h) gives it. Pure
// bookkeeping: no networking, no threads, no clocks. NOT thread-safe; the
// node's HostedActors (agent.h) calls it under its lock.
//
// An actor asks for an amount of "GPU" (its SpawnOptions::resources), as in
// Ray:
//   0          no device
//   0 < k < 1  one device with at least k of it free; fractions pack: the
//              device with the least free that still fits, the lowest index
//              among equals
//   k whole    k devices nobody else holds any of, the lowest indices first
// Any other amount (1.5) is refused. Invariant, per device: the shares held
// on it add up to at most 1 (+ Resources::kEpsilon), and a device held whole
// is held by one actor alone.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"

namespace troupe::cluster {

// OK for an amount of GPU an actor may ask for (above); InvalidArgument
// saying what to ask instead otherwise.
[[nodiscard]] absl::Status check_gpu_request(double amount);

class GpuAssignment {
 public:
  // A node of `devices` GPUs, indices 0..devices-1, none held.
  explicit GpuAssignment(int devices);

  // Gives actor `actor` devices for `amount` GPUs; returns their indices,
  // ascending (empty for 0). An actor that already holds devices keeps them,
  // and gets them back, whatever `amount`. Errors: InvalidArgument (see
  // check_gpu_request), ResourceExhausted naming what each device has free
  // when no device, or not enough of them, can take the request; nothing
  // changes then.
  [[nodiscard]] absl::StatusOr<std::vector<int>> assign(uint64_t actor, double amount);
  // Frees what `actor` holds; nothing if it holds none.
  void release(uint64_t actor);

  // The indices `actor` holds, ascending; empty if none.
  std::vector<int> of(uint64_t actor) const;
  bool holds(uint64_t actor) const { return held_.contains(actor); }
  int devices() const { return static_cast<int>(used_.size()); }

 private:
  struct Holding {
    std::vector<int> devices;  // ascending
    double share = 1;          // of each of them
  };
  // Per device: the share held, 0..1.
  std::vector<double> used_;
  std::map<uint64_t, Holding> held_;
};

}  // namespace troupe::cluster
