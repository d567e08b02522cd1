// RoutedGroup: a Group (group.h) whose operations go where their buffers
// live. Host memory goes over the host transports, as in Group; device
// memory goes through a device communicator (NCCL's, device_collectives.h)
// for the same members and generation, or, where the members cannot form
// one, is staged: copied to host memory, run by the host collectives, and
// copied back.
//
// Forming one takes two steps around the host group's rendezvous:
//
//   auto agreed = RoutedGroup::agree(store, {.group, .generation, .rank, .size, .device = 0});
//   auto host = Group::create(transport, store, {...same group and generation...});
//   auto group = RoutedGroup::create(*std::move(host), store, *agreed);
//
// agree() publishes this member's device under "<group>/<generation>/device/<rank>" -
// "host", its device's UUID, or why it cannot use the device it was given -
// and, for a member with a device, reads every member's: the group uses its
// device communicator (DevicePath::kDevice) when every member has a device of
// its own; it stages (kStaged) when some member is host-only or two share one
// physical device (which NCCL refuses). A member given no device (-1) does
// not wait for the others, never loads the backend, and takes host buffers
// only (kNone).
//
// Routing. Each operation asks the backend where each of its buffers lives:
// all host memory goes the host way; all on this member's device goes the
// device way; anything else (buffers on two sides, or on another device) is
// InvalidArgument. Every rank must pass buffers of the same side to the same
// operation. On the device path allreduce, reduce_scatter, allgather,
// broadcast and send/recv use the communicator; reduce_scatter_v and
// allgather_v are staged; barrier is always the host group's. Operations on
// device buffers keep their issue order among themselves (a staged one
// waits for the device operations issued before it, and a device operation
// issued after a staged one waits, on the caller's thread, for it).
//
// Device buffers must be ready when the operation is issued (the kernels
// that wrote them have completed) and stay untouched until its Work is
// done; the result is then in device memory, visible to any stream.
//
// Point to point on the device path: the communicator has no tags; a send
// and the peer's receive match in the order each rank issued them, so both
// must issue them in the same order (tags are checked, not matched), and a
// rank's device operations run one at a time in issue order, so pair
// sends and receives as NCCL requires. A send to oneself is InvalidArgument.
//
// Failures: the host group and the device communicator fail together
// (detail/device_queue.h): abort() aborts both; failed() says so.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "transport/collectives/device_collectives.h"
#include "transport/collectives/group.h"

namespace troupe::transport {

namespace detail {
class DeviceQueue;
}  // namespace detail

// What the members agreed on for device buffers.
enum class DevicePath : uint8_t {
  kNone,    // this member has no device: host buffers only
  kDevice,  // every member has a device of its own: the device communicator
  kStaged,  // copied to host memory, run by the host collectives, copied back
};
std::string_view to_string(DevicePath path);  // "none", "device", "staged"

struct DeviceOptions {
  // As the host group's CommunicatorOptions.
  std::string group = "group";
  uint64_t generation = 0;
  int rank = 0;
  int size = 1;
  // This member's device ordinal; -1: host memory only.
  int device = -1;
  // The backend; null: NCCL's (device_collectives()), loaded when device >= 0.
  DeviceCollectives* backend = nullptr;
  // The wait for the other members' devices, the device communicator's
  // rendezvous, and each device operation.
  absl::Duration timeout = absl::Seconds(30);
};

// The outcome of agree(): create()'s input.
struct DeviceAgreement {
  DeviceOptions options;  // the backend resolved
  DevicePath path = DevicePath::kNone;
  std::string why;  // why kStaged ("rank 1 is host-only", "ranks 0 and 1 share GPU-...")
};

class RoutedGroup {
 public:
  // Publishes this member's device and agrees on the path with the others.
  // Errors: FailedPrecondition when this member cannot use its device (the
  // backend cannot be loaded, no such device), after telling the others, or
  // when another member cannot (each member with a device fails at once);
  // DeadlineExceeded when a member did not publish within the timeout; the
  // store's errors.
  static absl::StatusOr<DeviceAgreement> agree(Store& store, DeviceOptions options);
  // Joins `host` (formed for the same group and generation) and, on the
  // device path, forms the device communicator through `store`. Errors:
  // those of DeviceCollectives::create_communicator.
  static absl::StatusOr<std::unique_ptr<RoutedGroup>> create(std::unique_ptr<Group> host,
                                                             Store& store,
                                                             const DeviceAgreement& agreement);
  // The device communicator goes first (see DeviceQueue's destructor), then
  // the host group (Group's).
  ~RoutedGroup();

  int rank() const { return host_->rank(); }
  int size() const { return host_->size(); }
  uint64_t generation() const { return host_->generation(); }
  DevicePath path() const { return agreement_.path; }
  // Why the group stages device buffers; empty otherwise.
  const std::string& path_reason() const { return agreement_.why; }
  int device() const { return agreement_.options.device; }

  // The operations of Group, routed.
  Work allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                       Algorithm algorithm = Algorithm::kAuto);
  Work reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output, size_t count);
  Work allgather_async(const void* input, void* output, size_t bytes);
  Work reduce_scatter_v_async(DType type, ReduceOp op, const void* input, void* output,
                              std::span<const size_t> counts);
  Work allgather_v_async(const void* input, void* output, std::span<const size_t> bytes);
  Work broadcast_async(void* data, size_t bytes, int root);
  Work barrier_async() { return host_->barrier_async(); }
  // From device memory: done when the peer has received it (device path) or
  // once copied (staged).
  Work send_async(int peer, uint64_t tag, const void* data, size_t bytes);
  Work send_borrowed_async(int peer, uint64_t tag, const void* data, size_t bytes);
  Work recv_async(int peer, uint64_t tag, void* data, size_t bytes);
  Work recv_in_place_async(int peer, uint64_t tag, void* data, size_t bytes);

  // Aborts the host group (telling the members) and the device communicator.
  void abort(const absl::Status& why, const std::vector<int>& lost = {});
  // The host group's failure, else the device communicator's.
  absl::Status failed() const;

  // As Group's. Device operations are not in traffic() (the backend does not
  // say what it sent); collectives_issued() counts them.
  Traffic traffic() const { return host_->traffic(); }
  uint64_t received_in_place() const { return host_->received_in_place(); }
  uint64_t collectives_issued() const;

 private:
  explicit RoutedGroup(std::unique_ptr<Group> host, DeviceAgreement agreement);

  // Where an operation's buffers live: kHostMemory or this member's device.
  // InvalidArgument when they are on two sides, or on another device.
  absl::StatusOr<int> locate(const char* op, std::initializer_list<const void*> buffers) const;
  // The operation on the device communicator, after any staged operation
  // issued before it.
  Work on_device(absl::FunctionRef<std::unique_ptr<DeviceOperation>(DeviceCommunicator&)> issue);
  // `run(communicator, host_in, host_out)` on host copies of device buffers,
  // in its turn in the host group, after the device operations issued before
  // it: `in` (in_bytes) is copied to host memory first if `copy_in`, and
  // `out` (out_bytes) back to the device after if `copy_out`. `in == out`
  // stages one buffer.
  Work staged(Group::Kind kind, const void* in, size_t in_bytes, bool copy_in, void* out,
              size_t out_bytes, bool copy_out,
              std::function<absl::Status(Communicator&, const void*, void*)> run);
  absl::Status check_peer(const char* op, int peer, uint64_t tag) const;

  const DeviceAgreement agreement_;
  DeviceCollectives* const backend_;  // null on DevicePath::kNone
  std::unique_ptr<Group> host_;
  std::unique_ptr<detail::DeviceQueue> device_;  // on DevicePath::kDevice; goes before host_
  std::atomic<uint64_t> device_collectives_{0};  // issued on device_
  std::mutex order_mu_;
  Work last_staged_ = Work::done_with(absl::OkStatus());  // under order_mu_
};

}  // namespace troupe::transport
