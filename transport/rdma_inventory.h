// What RDMA NICs this node has (libibverbs), for topology-aware placement.
// Never fails: a node without RDMA, or without the verbs library's devices,
// reports an empty inventory and why.
#pragma once

#include <string>
#include <vector>

namespace troupe::transport {

struct RdmaPort {
  int number = 0;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string link_layer;  // "InfiniBand" or "Ethernet" (RoCE)
  double gbps = 0;         // active width x lane speed
};

struct RdmaDevice {
  std::string name;    // "mlx5_0"
  int numa_node = -1;  // -1 when unknown
  std::vector<RdmaPort> ports;
};

struct RdmaInventory {
  std::vector<RdmaDevice> devices;
  std::string note;  // why `devices` is empty, when it is
};

RdmaInventory rdma_inventory();

// The ports of `inventory` that are up (ACTIVE): what a node offers as its
// "RDMA" resource.
int active_ports(const RdmaInventory& inventory);

// One line per port, or "no RDMA devices (<note>)".
std::string describe(const RdmaInventory& inventory);

}  // namespace troupe::transport
