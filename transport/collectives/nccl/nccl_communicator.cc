#include "transport/collectives/nccl/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/collectives/nccl/detail/nccl_state.h"

namespace troupe::transport {

namespace {

ncclDataType_t nccl_type(DType type) {
  switch (type) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Rank 0 creates the id and publishes it; the others wait for it until
// `deadline`.
absl::StatusOr<ncclUniqueId> exchange_id(Store& store, const NcclOptions& options,
                                         const std::string& name, absl::Time deadline) {
  const std::string key = absl::StrCat(options.group, "/", options.generation, "/nccl-id");
  ncclUniqueId id;
  if (options.rank == 0) {
    if (ncclResult_t result = ncclGetUniqueId(&id); result != ncclSuccess) {
      return detail::nccl_status(result, absl::StrCat(name, ": ncclGetUniqueId"));
    }
    if (absl::Status status = store.set(key, std::string(id.internal, sizeof(id.internal)));
        !status.ok()) {
      return status;
    }
    return id;
  }
  absl::StatusOr<std::string> value =
      store.wait_get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!value.ok()) {
    return absl::Status(
        value.status().code(),
        absl::StrCat(name, ": waiting for rank 0's NCCL id: ", value.status().message()));
  }
  if (value->size() != sizeof(id.internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": the NCCL unique id under '", key, "' is ", value->size(),
                     " bytes, not ", sizeof(id.internal), " (is something else using the key?)"));
  }
  std::memcpy(id.internal, value->data(), sizeof(id.internal));
  return id;
}

// ncclCommInitRankConfig in non-blocking mode, polled until `deadline`; the
// current device is this rank's.
absl::StatusOr<ncclComm_t> init_comm(const ncclUniqueId& id, const NcclOptions& options,
                                     const std::string& name, absl::Time deadline) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  absl::Duration backoff = absl::Microseconds(100);
  while (result == ncclInProgress && absl::Now() < deadline) {
    absl::SleepFor(std::min(backoff, std::max(deadline - absl::Now(), absl::ZeroDuration())));
    backoff = std::min(backoff * 2, absl::Milliseconds(10));
    ncclResult_t state = ncclInProgress;
    result = ncclCommGetAsyncError(comm, &state);
    if (result == ncclSuccess) result = state;
  }
  if (result == ncclSuccess) return comm;
  absl::Status status =
      result == ncclInProgress
          ? absl::DeadlineExceededError(absl::StrCat(
                name, ": NCCL's initialization did not complete within ",
                absl::FormatDuration(options.timeout), " (are all ", options.size,
                " ranks calling create with this group and generation, and can they reach "
                "rank 0?); it was aborted"))
          : detail::nccl_status(result, absl::StrCat(name, ": ncclCommInitRankConfig"));
  if (comm != nullptr) (void)ncclCommAbort(comm);
  return status;
}

}  // namespace

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unknown";
  // Since 2.9 the code is major * 10000 + minor * 100 + patch.
  return absl::StrCat(code / 10000, ".", code / 100 % 100, ".", code % 100);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Store& store,
                                                                           NcclOptions options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("NcclCommunicator: rank ", options.rank,
                                                   " is not in a group of size ", options.size));
  }
  if (options.device < 0 || options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicator: device ", options.device, " must be a CUDA ordinal and ",
                     "timeout ", absl::FormatDuration(options.timeout), " positive"));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string name =
      absl::StrCat("nccl group '", options.group, "' generation ", options.generation, " rank ",
                   options.rank, " of ", options.size, " (CUDA device ", options.device, ")");

  // The device first, so that a rank without one fails before it publishes
  // or consumes an id.
  detail::DeviceGuard guard(options.device);
  if (!guard.status().ok()) {
    return absl::Status(guard.status().code(), absl::StrCat(name, ": ", guard.status().message()));
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t code = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      code != cudaSuccess) {
    return detail::cuda_status(code, absl::StrCat(name, ": creating its stream"));
  }
  void* scratch = nullptr;
  if (cudaError_t code = cudaMalloc(&scratch, sizeof(float)); code != cudaSuccess) {
    (void)cudaStreamDestroy(stream);
    return detail::cuda_status(code, absl::StrCat(name, ": allocating the barrier's buffer"));
  }
  auto release = [&] {
    (void)cudaFree(scratch);
    (void)cudaStreamDestroy(stream);
  };

  absl::StatusOr<ncclUniqueId> id = exchange_id(store, options, name, deadline);
  if (!id.ok()) {
    release();
    return id.status();
  }
  absl::StatusOr<ncclComm_t> comm = init_comm(*id, options, name, deadline);
  if (!comm.ok()) {
    release();
    return comm.status();
  }
  auto state = std::make_shared<detail::NcclState>(*comm, options.device, name);
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(options), std::move(state), stream, scratch));
}

NcclCommunicator::NcclCommunicator(NcclOptions options, std::shared_ptr<detail::NcclState> state,
                                   cudaStream_t stream, void* scratch)
    : options_(std::move(options)), state_(std::move(state)), stream_(stream), scratch_(scratch) {}

NcclCommunicator::~NcclCommunicator() {
  state_->close(absl::Now() + options_.timeout);
  detail::DeviceGuard guard(options_.device);
  (void)cudaFree(scratch_);
  (void)cudaStreamDestroy(stream_);
}

template <typename Call>
NcclWork NcclCommunicator::issue(const char* op, cudaStream_t stream, const Call& call) {
  absl::StatusOr<cudaEvent_t> event =
      state_->issue(op, stream == nullptr ? stream_ : stream, absl::Now() + options_.timeout, call);
  if (!event.ok()) return NcclWork(std::move(event).status());
  return NcclWork(state_, *event, op);
}

absl::Status NcclCommunicator::check_rank(const char* op, const char* what, int rank) const {
  if (rank >= 0 && rank < options_.size) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(state_->name(), ": ", op, ": ", what, " ", rank, " is not a rank of the group"));
}

absl::Status NcclCommunicator::check_peer(const char* op, int peer) const {
  if (peer == options_.rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        state_->name(), ": ", op, " with itself (a rank copies to itself with send_recv)"));
  }
  return check_rank(op, "peer", peer);
}

NcclWork NcclCommunicator::allreduce(const void* input, void* output, size_t count, DType type,
                                     ReduceOp op, cudaStream_t stream) {
  return issue("allreduce", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(input, output, count, nccl_type(type), nccl_op(op), comm, s);
  });
}

NcclWork NcclCommunicator::reduce_scatter(const void* input, void* output, size_t count, DType type,
                                          ReduceOp op, cudaStream_t stream) {
  return issue("reduce_scatter", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclReduceScatter(input, output, count, nccl_type(type), nccl_op(op), comm, s);
  });
}

NcclWork NcclCommunicator::allgather(const void* input, void* output, size_t count, DType type,
                                     cudaStream_t stream) {
  return issue("allgather", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(input, output, count, nccl_type(type), comm, s);
  });
}

NcclWork NcclCommunicator::broadcast(const void* input, void* output, size_t count, DType type,
                                     int root, cudaStream_t stream) {
  if (absl::Status status = check_rank("broadcast", "root", root); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("broadcast", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(input, output, count, nccl_type(type), root, comm, s);
  });
}

NcclWork NcclCommunicator::send(const void* input, size_t count, DType type, int peer,
                                cudaStream_t stream) {
  if (absl::Status status = check_peer("send", peer); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("send", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclSend(input, count, nccl_type(type), peer, comm, s);
  });
}

NcclWork NcclCommunicator::recv(void* output, size_t count, DType type, int peer,
                                cudaStream_t stream) {
  if (absl::Status status = check_peer("recv", peer); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("recv", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclRecv(output, count, nccl_type(type), peer, comm, s);
  });
}

NcclWork NcclCommunicator::send_recv(const void* input, int to, void* output, int from,
                                     size_t count, DType type, cudaStream_t stream) {
  absl::Status status = check_rank("send_recv", "destination", to);
  if (status.ok()) status = check_rank("send_recv", "source", from);
  if (!status.ok()) return NcclWork(std::move(status));
  return issue("send_recv", stream, [&](ncclComm_t comm, cudaStream_t s) {
    (void)ncclGroupStart();
    ncclResult_t sent = ncclSend(input, count, nccl_type(type), to, comm, s);
    ncclResult_t received = ncclRecv(output, count, nccl_type(type), from, comm, s);
    // Ends the group even when a call in it failed; it reports their errors.
    ncclResult_t ended = ncclGroupEnd();
    if (sent != ncclSuccess) return sent;
    if (received != ncclSuccess) return received;
    return ended;
  });
}

NcclWork NcclCommunicator::barrier(cudaStream_t stream) {
  return issue("barrier", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm, s);
  });
}

NcclWork NcclCommunicator::allgather_bytes(const void* input, void* output, size_t bytes,
                                           cudaStream_t stream) {
  return issue("allgather", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(input, output, bytes, ncclUint8, comm, s);
  });
}

NcclWork NcclCommunicator::broadcast_bytes(const void* input, void* output, size_t bytes, int root,
                                           cudaStream_t stream) {
  if (absl::Status status = check_rank("broadcast", "root", root); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("broadcast", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(input, output, bytes, ncclUint8, root, comm, s);
  });
}

NcclWork NcclCommunicator::send_bytes(const void* input, size_t bytes, int peer,
                                      cudaStream_t stream) {
  if (absl::Status status = check_peer("send", peer); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("send", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclSend(input, bytes, ncclUint8, peer, comm, s);
  });
}

NcclWork NcclCommunicator::recv_bytes(void* output, size_t bytes, int peer, cudaStream_t stream) {
  if (absl::Status status = check_peer("recv", peer); !status.ok()) {
    return NcclWork(std::move(status));
  }
  return issue("recv", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclRecv(output, bytes, ncclUint8, peer, comm, s);
  });
}

absl::Status NcclCommunicator::failure() const {
  return state_->failure();
}

void NcclCommunicator::abort(const absl::Status& why) {
  state_->abort(why);
}

}  // namespace troupe::transport
