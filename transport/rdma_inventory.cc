#include "transport/rdma_inventory.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troupe::transport {
namespace {

// IB active_width codes to lane counts.
int lanes(uint8_t width) {
  switch (width) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
    default:
      return 0;
  }
}

// IB active_speed codes to Gb/s per lane.
double lane_gbps(uint32_t speed) {
  switch (speed) {
    case 1:
      return 2.5;
    case 2:
      return 5.0;
    case 4:
      return 10.0;
    case 8:
      return 10.3125;
    case 16:
      return 14.0625;
    case 32:
      return 25.78125;
    case 64:
      return 53.125;
    case 128:
      return 106.25;
    default:
      return 0;
  }
}

int numa_node_of(const std::string& device) {
  std::ifstream f("/sys/class/infiniband/" + device + "/device/numa_node");
  int node = -1;
  if (f >> node) return node;
  return -1;
}

}  // namespace

int active_ports(const RdmaInventory& inventory) {
  const std::string active = ibv_port_state_str(IBV_PORT_ACTIVE);
  int n = 0;
  for (const RdmaDevice& d : inventory.devices) {
    for (const RdmaPort& p : d.ports)
      n += p.state == active ? 1 : 0;
  }
  return n;
}

RdmaInventory rdma_inventory() {
  RdmaInventory inv;
  int count = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    inv.note = absl::StrCat("ibv_get_device_list returned NULL: ",
                            errno != 0 ? std::strerror(errno) : "no verbs provider");
    return inv;
  }
  for (int i = 0; i < count; ++i) {
    RdmaDevice dev;
    dev.name = ibv_get_device_name(list[i]);
    dev.numa_node = numa_node_of(dev.name);
    if (ibv_context* ctx = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(ctx, &attr) == 0) {
        for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
          ibv_port_attr port{};
          if (ibv_query_port(ctx, p, &port) != 0) continue;
          RdmaPort rp;
          rp.number = p;
          rp.state = ibv_port_state_str(port.state);
          rp.link_layer = port.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
          rp.gbps = lanes(port.active_width) * lane_gbps(port.active_speed);
          dev.ports.push_back(rp);
        }
      }
      ibv_close_device(ctx);
    }
    inv.devices.push_back(std::move(dev));
  }
  ibv_free_device_list(list);
  if (inv.devices.empty()) inv.note = "ibv_get_device_list found none";
  return inv;
}

std::string describe(const RdmaInventory& inventory) {
  if (inventory.devices.empty()) return absl::StrCat("no RDMA devices (", inventory.note, ")");
  std::string out;
  for (const RdmaDevice& d : inventory.devices) {
    if (d.ports.empty()) absl::StrAppend(&out, d.name, ": no usable ports\n");
    for (const RdmaPort& p : d.ports) {
      absl::StrAppend(&out, absl::StrFormat("%s port %d: %s, %.0f Gb/s %s, NUMA %d\n", d.name,
                                            p.number, p.state, p.gbps, p.link_layer, d.numa_node));
    }
  }
  return out;
}

}  // namespace troupe::transport
