// A stand-in for NCCL's backend (transport/collectives/device_collectives.h)
// made of host memory, so that a collective group's routing and staging run
// without a GPU. It is a test double at the plugin boundary, honest where a
// wrong routing would otherwise pass:
//
//   - Its "device memory" holds every byte XORed with kMask. Host code that
//     reads or writes a device buffer directly (a device buffer sent the host
//     way, or a staging copy skipped) sees garbage, and the closed forms the
//     tests check fail. Only its copies and its communicators decode it.
//   - Its communicators move the bytes between ranks themselves, through an
//     exchange shared by the communicators of one group and generation in
//     this process, after a rendezvous through the Store as NCCL's (rank 0
//     publishes an id under "<group>/<generation>/nccl-id"); an operation
//     runs once every rank has issued it, and until then it is pending.
//   - As NCCL, it refuses two ranks of one communicator on one device, and an
//     abort is local: the other ranks' operations stay pending until they
//     abort or time out.
//
// Devices: `devices` ordinals; device_uuid(d) is "<machine>-gpu<d>", so ranks
// given one ordinal of one instance share a device, and instances made with
// different `machine` names have different devices.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/collectives/device_collectives.h"

namespace troupe::transport::testing {

class FakeDeviceCollectives final : public DeviceCollectives {
 public:
  static constexpr unsigned char kMask = 0xA5;

  explicit FakeDeviceCollectives(int devices, std::string machine = "fake")
      : devices_(devices), machine_(std::move(machine)) {}
  ~FakeDeviceCollectives() override {
    for (auto& [start, a] : allocations_)
      delete[] a.data;
  }

  // `bytes` of device memory on `device`, zero as the device reads it.
  void* allocate(int device, size_t bytes) {
    auto* data = new std::byte[std::max<size_t>(bytes, 1)];
    std::memset(data, kMask, std::max<size_t>(bytes, 1));
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[reinterpret_cast<uintptr_t>(data)] = {data, std::max<size_t>(bytes, 1), device};
    return data;
  }
  // Host values into device memory, and back (the test's own copies, not counted).
  static void upload(void* device_data, const void* host, size_t bytes) {
    encode(device_data, host, bytes);
  }
  static void download(void* host, const void* device_data, size_t bytes) {
    encode(host, device_data, bytes);
  }
  template <typename T>
  void* allocate_with(int device, const std::vector<T>& values) {
    void* data = allocate(device, values.size() * sizeof(T));
    upload(data, values.data(), values.size() * sizeof(T));
    return data;
  }
  template <typename T>
  std::vector<T> read(const void* device_data, size_t count) {
    std::vector<T> values(count);
    download(values.data(), device_data, count * sizeof(T));
    return values;
  }

  // What went which way.
  int communicators() const { return communicators_.load(); }
  int device_operations() const { return device_operations_.load(); }
  int copies_to_host() const { return copies_to_host_.load(); }
  int copies_to_device() const { return copies_to_device_.load(); }

  // --- DeviceCollectives ---

  std::string name() override { return absl::StrCat("fake devices of ", machine_); }
  absl::Status check_device(int device) override {
    if (device >= 0 && device < devices_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("fake:", device, " asked for, ", devices_, " fake devices here"));
  }
  absl::StatusOr<std::string> device_uuid(int device) override {
    if (absl::Status s = check_device(device); !s.ok()) return s;
    return absl::StrCat(machine_, "-gpu", device);
  }
  int device_of(const void* data, int) override { return where(data); }
  // The fake device `data` is memory of, or kHostMemory.
  int where(const void* data) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto at = reinterpret_cast<uintptr_t>(data);
    auto it = allocations_.upper_bound(at);
    if (it == allocations_.begin()) return kHostMemory;
    --it;
    return at < it->first + it->second.bytes ? it->second.device : kHostMemory;
  }
  absl::Status copy_to_host(void* host, const void* device_data, size_t bytes,
                            int device) override {
    if (where(device_data) != device) {
      return absl::InvalidArgumentError("copy_to_host: not device memory of that device");
    }
    copies_to_host_.fetch_add(1);
    encode(host, device_data, bytes);
    return absl::OkStatus();
  }
  absl::Status copy_to_device(void* device_data, const void* host, size_t bytes,
                              int device) override {
    if (where(device_data) != device) {
      return absl::InvalidArgumentError("copy_to_device: not device memory of that device");
    }
    copies_to_device_.fetch_add(1);
    encode(device_data, host, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceCommunicator>> create_communicator(
      Store& store, const DeviceCommunicatorOptions& options) override;

 private:
  struct Allocation {
    std::byte* data = nullptr;
    size_t bytes = 0;
    int device = 0;
  };
  class Exchange;
  class FakeCommunicator;

  // dst = src ^ kMask: device bytes to host values and back.
  static void encode(void* dst, const void* src, size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    const auto* s = static_cast<const unsigned char*>(src);
    for (size_t i = 0; i < bytes; ++i)
      d[i] = s[i] ^ kMask;
  }

  const int devices_;
  const std::string machine_;
  std::mutex mu_;
  std::map<uintptr_t, Allocation> allocations_;                 // by start, under mu_
  std::map<std::string, std::shared_ptr<Exchange>> exchanges_;  // by id, under mu_
  uint64_t next_id_ = 0;                                        // under mu_
  std::atomic<int> communicators_{0};
  std::atomic<int> device_operations_{0};
  std::atomic<int> copies_to_host_{0};
  std::atomic<int> copies_to_device_{0};
};

// One operation's state, shared by its handle and the exchange.
struct FakeOperationState {
  std::mutex mu;
  std::optional<absl::Status> status;  // set once it ran
  void finish(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (!status) status = std::move(s);
  }
};

// The ranks of one communicator: the operations each has issued, run when
// all have (collectives, by sequence) or when a send meets its receive.
class FakeDeviceCollectives::Exchange {
 public:
  enum class Kind { kAllreduce, kReduceScatter, kAllgather, kBroadcast };
  struct Call {
    Kind kind = Kind::kAllreduce;
    DType type = DType::kFloat32;
    ReduceOp op = ReduceOp::kSum;
    const void* input = nullptr;
    void* output = nullptr;
    size_t count = 0;  // elements (reductions) or bytes
    int root = 0;
    std::shared_ptr<FakeOperationState> state;
  };
  struct PointToPoint {
    void* data = nullptr;
    size_t bytes = 0;
    std::shared_ptr<FakeOperationState> state;
  };

  explicit Exchange(int size) : size_(size), uuids_(static_cast<size_t>(size)) {}

  // Waits until every rank has joined; FailedPrecondition when two share a
  // device (as NCCL's "Duplicate GPU detected").
  absl::Status join(int rank, const std::string& uuid, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    uuids_[static_cast<size_t>(rank)] = uuid;
    ++joined_;
    changed_.notify_all();
    if (!changed_.wait_until(lock, absl::ToChronoTime(absl::Now() + timeout),
                             [&] { return joined_ == size_; })) {
      return absl::DeadlineExceededError("fake communicator: a rank did not join");
    }
    for (int a = 0; a < size_; ++a) {
      for (int b = a + 1; b < size_; ++b) {
        if (uuids_[static_cast<size_t>(a)] == uuids_[static_cast<size_t>(b)]) {
          return absl::FailedPreconditionError(absl::StrCat("fake communicator: ranks ", a, " and ",
                                                            b, " on one device (Duplicate GPU)"));
        }
      }
    }
    return absl::OkStatus();
  }

  // A rank aborted: nothing more runs (the others' operations stay pending).
  void poison() {
    std::lock_guard<std::mutex> lock(mu_);
    poisoned_ = true;
  }

  void collective(int rank, uint64_t sequence, Call call) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Call>& slot = pending_[sequence];
    slot.resize(static_cast<size_t>(size_));
    slot[static_cast<size_t>(rank)] = std::move(call);
    if (poisoned_) return;
    for (const Call& c : slot) {
      if (c.state == nullptr) return;
    }
    run(slot);
    pending_.erase(sequence);
  }

  void point_to_point(int from, int to, bool is_send, PointToPoint p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& mine = (is_send ? sends_ : recvs_)[{from, to}];
    mine.push_back(std::move(p));
    auto& sends = sends_[{from, to}];
    auto& recvs = recvs_[{from, to}];
    while (!poisoned_ && !sends.empty() && !recvs.empty()) {
      PointToPoint s = std::move(sends.front());
      PointToPoint r = std::move(recvs.front());
      sends.pop_front();
      recvs.pop_front();
      if (s.bytes != r.bytes) {
        absl::Status bad = absl::InternalError(
            absl::StrCat("fake send of ", s.bytes, " bytes met a recv of ", r.bytes));
        s.state->finish(bad);
        r.state->finish(bad);
        continue;
      }
      if (s.bytes > 0) std::memcpy(r.data, s.data, s.bytes);  // both encoded alike
      s.state->finish(absl::OkStatus());
      r.state->finish(absl::OkStatus());
    }
  }

 private:
  // Every rank's call of one collective: decode, compute, encode.
  void run(std::vector<Call>& slot) {
    const Call& first = slot[0];
    for (const Call& c : slot) {
      if (c.kind != first.kind || c.count != first.count || c.type != first.type ||
          c.root != first.root) {
        for (Call& each : slot)
          each.state->finish(absl::InternalError("fake collective: ranks disagree on the call"));
        return;
      }
    }
    const size_t n = slot.size();
    const size_t element = element_size(first.type);
    auto host = [](const void* device_data, size_t bytes) {
      std::vector<std::byte> v(bytes);
      encode(v.data(), device_data, bytes);
      return v;
    };
    switch (first.kind) {
      case Kind::kAllreduce: {
        const size_t bytes = first.count * element;
        std::vector<std::byte> acc = host(slot[0].output, bytes);
        for (size_t r = 1; r < n; ++r) {
          std::vector<std::byte> in = host(slot[r].output, bytes);
          reduce_into(first.type, first.op, acc.data(), in.data(), first.count);
        }
        if (first.op == ReduceOp::kAvg)
          scale(first.type, acc.data(), first.count, 1.0f / static_cast<float>(n));
        for (Call& c : slot)
          encode(c.output, acc.data(), bytes);
        break;
      }
      case Kind::kReduceScatter: {
        const size_t bytes = first.count * element;
        std::vector<std::vector<std::byte>> inputs;
        for (const Call& c : slot)
          inputs.push_back(host(c.input, bytes * n));
        for (size_t b = 0; b < n; ++b) {
          std::vector<std::byte> acc(inputs[0].begin() + static_cast<ptrdiff_t>(b * bytes),
                                     inputs[0].begin() + static_cast<ptrdiff_t>((b + 1) * bytes));
          for (size_t r = 1; r < n; ++r)
            reduce_into(first.type, first.op, acc.data(), inputs[r].data() + b * bytes,
                        first.count);
          if (first.op == ReduceOp::kAvg)
            scale(first.type, acc.data(), first.count, 1.0f / static_cast<float>(n));
          encode(slot[b].output, acc.data(), bytes);
        }
        break;
      }
      case Kind::kAllgather: {
        std::vector<std::byte> all;
        for (const Call& c : slot) {
          std::vector<std::byte> in = host(c.input, first.count);
          all.insert(all.end(), in.begin(), in.end());
        }
        for (Call& c : slot)
          encode(c.output, all.data(), all.size());
        break;
      }
      case Kind::kBroadcast: {
        std::vector<std::byte> value =
            host(slot[static_cast<size_t>(first.root)].output, first.count);
        for (Call& c : slot)
          encode(c.output, value.data(), value.size());
        break;
      }
    }
    for (Call& c : slot)
      c.state->finish(absl::OkStatus());
  }

  const int size_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<std::string> uuids_;
  int joined_ = 0;
  bool poisoned_ = false;
  std::map<uint64_t, std::vector<Call>> pending_;
  std::map<std::pair<int, int>, std::deque<PointToPoint>> sends_, recvs_;
};

// One rank's communicator over an Exchange.
class FakeDeviceCollectives::FakeCommunicator final : public DeviceCommunicator {
 public:
  FakeCommunicator(FakeDeviceCollectives& backend, std::shared_ptr<Exchange> exchange,
                   DeviceCommunicatorOptions options)
      : backend_(backend), exchange_(std::move(exchange)), options_(std::move(options)) {}

  std::unique_ptr<DeviceOperation> allreduce(DType type, ReduceOp op, void* data,
                                             size_t count) override {
    return collective({.kind = Exchange::Kind::kAllreduce,
                       .type = type,
                       .op = op,
                       .input = data,
                       .output = data,
                       .count = count},
                      {data});
  }
  std::unique_ptr<DeviceOperation> reduce_scatter(DType type, ReduceOp op, const void* input,
                                                  void* output, size_t count) override {
    return collective({.kind = Exchange::Kind::kReduceScatter,
                       .type = type,
                       .op = op,
                       .input = input,
                       .output = output,
                       .count = count},
                      {input, output});
  }
  std::unique_ptr<DeviceOperation> allgather(const void* input, void* output,
                                             size_t bytes) override {
    return collective(
        {.kind = Exchange::Kind::kAllgather, .input = input, .output = output, .count = bytes},
        {input, output});
  }
  std::unique_ptr<DeviceOperation> broadcast(void* data, size_t bytes, int root) override {
    if (root < 0 || root >= options_.size) {
      return failed(absl::InvalidArgumentError(absl::StrCat("fake broadcast: root ", root)));
    }
    return collective({.kind = Exchange::Kind::kBroadcast,
                       .input = data,
                       .output = data,
                       .count = bytes,
                       .root = root},
                      {data});
  }
  std::unique_ptr<DeviceOperation> send(int peer, const void* data, size_t bytes) override {
    return point_to_point(options_.rank, peer, true, const_cast<void*>(data), bytes);
  }
  std::unique_ptr<DeviceOperation> recv(int peer, void* data, size_t bytes) override {
    return point_to_point(peer, options_.rank, false, data, bytes);
  }
  void abort(const absl::Status& why) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!failure_.ok()) return;
      failure_ = absl::AbortedError(
          absl::StrCat("fake communicator rank ", options_.rank, " was aborted: ", why.ToString()));
    }
    exchange_->poison();
  }
  absl::Status failure() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return failure_;
  }

 private:
  class Operation final : public DeviceOperation {
   public:
    Operation(const FakeCommunicator* comm, std::shared_ptr<FakeOperationState> state)
        : comm_(comm), state_(std::move(state)) {}
    std::optional<absl::Status> poll() override {
      // As NCCL's: once aborted, nothing it did is to be trusted.
      if (absl::Status failed = comm_->failure(); !failed.ok()) return failed;
      std::lock_guard<std::mutex> lock(state_->mu);
      return state_->status;
    }

   private:
    const FakeCommunicator* comm_;  // outlives its operations (the queue completes them first)
    std::shared_ptr<FakeOperationState> state_;
  };

  std::unique_ptr<DeviceOperation> failed(absl::Status why) {
    auto state = std::make_shared<FakeOperationState>();
    state->finish(std::move(why));
    return std::make_unique<Operation>(this, std::move(state));
  }

  // InvalidArgument unless every buffer is device memory of this rank's device.
  absl::Status check_buffers(std::initializer_list<const void*> buffers) {
    for (const void* b : buffers) {
      if (b != nullptr && backend_.where(b) != options_.device) {
        return absl::InvalidArgumentError(
            absl::StrCat("fake communicator rank ", options_.rank,
                         ": a buffer that is not device memory of fake:", options_.device));
      }
    }
    return absl::OkStatus();
  }

  std::unique_ptr<DeviceOperation> collective(Exchange::Call call,
                                              std::initializer_list<const void*> buffers) {
    backend_.device_operations_.fetch_add(1);
    if (absl::Status s = check_buffers(buffers); !s.ok()) return failed(std::move(s));
    if (absl::Status f = failure(); !f.ok()) return failed(std::move(f));
    auto state = std::make_shared<FakeOperationState>();
    call.state = state;
    exchange_->collective(options_.rank, sequence_++, std::move(call));
    return std::make_unique<Operation>(this, std::move(state));
  }

  std::unique_ptr<DeviceOperation> point_to_point(int from, int to, bool is_send, void* data,
                                                  size_t bytes) {
    backend_.device_operations_.fetch_add(1);
    const int peer = is_send ? to : from;
    if (peer == options_.rank || peer < 0 || peer >= options_.size) {
      return failed(absl::InvalidArgumentError(absl::StrCat("fake p2p with rank ", peer)));
    }
    if (absl::Status s = check_buffers({data}); !s.ok()) return failed(std::move(s));
    if (absl::Status f = failure(); !f.ok()) return failed(std::move(f));
    auto state = std::make_shared<FakeOperationState>();
    exchange_->point_to_point(from, to, is_send, {data, bytes, state});
    return std::make_unique<Operation>(this, std::move(state));
  }

  FakeDeviceCollectives& backend_;
  const std::shared_ptr<Exchange> exchange_;
  const DeviceCommunicatorOptions options_;
  uint64_t sequence_ = 0;  // of collectives: issued from one thread at a time
  mutable std::mutex mu_;
  absl::Status failure_;  // under mu_
};

inline absl::StatusOr<std::unique_ptr<DeviceCommunicator>>
FakeDeviceCollectives::create_communicator(Store& store, const DeviceCommunicatorOptions& options) {
  if (absl::Status s = check_device(options.device); !s.ok()) return s;
  const std::string key = absl::StrCat(options.group, "/", options.generation, "/nccl-id");
  std::string id;
  if (options.rank == 0) {
    std::shared_ptr<Exchange> exchange = std::make_shared<Exchange>(options.size);
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = absl::StrCat(machine_, "-exchange-", next_id_++);
      exchanges_[id] = exchange;
    }
    if (absl::Status s = store.set(key, id); !s.ok()) return s;
  } else {
    absl::StatusOr<std::string> got = store.wait_get(key, options.timeout);
    if (!got.ok()) return got.status();
    id = *std::move(got);
  }
  std::shared_ptr<Exchange> exchange;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = exchanges_.find(id);
    if (it == exchanges_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("fake communicator: no exchange '", id, "'"));
    }
    exchange = it->second;
  }
  absl::StatusOr<std::string> uuid = device_uuid(options.device);
  if (!uuid.ok()) return uuid.status();
  if (absl::Status s = exchange->join(options.rank, *uuid, options.timeout); !s.ok()) return s;
  communicators_.fetch_add(1);
  return std::make_unique<FakeCommunicator>(*this, std::move(exchange), options);
}

}  // namespace troupe::transport::testing
