#include "transport/collectives/group.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace troupe::transport {
namespace {

// Point-to-point tags live above every collective's (detail::tag_of keeps
// sequences below 2^31 << 32).
constexpr uint64_t kPointToPoint = uint64_t{1} << 63;
constexpr uint64_t kMaxUserTag = uint64_t{1} << 62;

}  // namespace

absl::StatusOr<std::unique_ptr<Group>> Group::create(Transport& transport, Store& store,
                                                     CommunicatorOptions options) {
  auto comm = Communicator::create(transport, store, std::move(options));
  if (!comm.ok()) return comm.status();
  return std::make_unique<Group>(*std::move(comm));
}

Group::Group(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {
  worker_ = std::thread([this] { run_worker(); });
}

Group::~Group() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (!queue_.empty() || running_) {
      comm_->abort(absl::AbortedError(
          absl::StrCat("rank ", comm_->rank(), " left the group with operations pending")));
    }
  }
  queued_.notify_all();
  worker_.join();
}

Work Group::enqueue(std::function<absl::Status(Communicator&)> run) {
  Op op{std::move(run), Work()};
  Work work = op.work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  queued_.notify_one();
  return work;
}

void Group::run_worker() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    absl::Status s = op.run(*comm_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
    }
    op.work.finish(std::move(s));
  }
}

Work Group::allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                            Algorithm algorithm) {
  return enqueue(
      [=](Communicator& c) { return transport::allreduce(c, type, op, data, count, algorithm); });
}

Work Group::reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output,
                                 size_t count) {
  return enqueue([=](Communicator& c) {
    return transport::reduce_scatter(c, type, op, input, output, count);
  });
}

Work Group::allgather_async(const void* input, void* output, size_t bytes) {
  return enqueue([=](Communicator& c) { return transport::allgather(c, input, output, bytes); });
}

Work Group::broadcast_async(void* data, size_t bytes, int root) {
  return enqueue([=](Communicator& c) { return transport::broadcast(c, data, bytes, root); });
}

Work Group::barrier_async() {
  return enqueue([](Communicator& c) { return transport::barrier(c); });
}

Work Group::send_async(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (peer < 0 || peer >= size() || tag >= kMaxUserTag) {
    return Work::done_with(absl::InvalidArgumentError(
        absl::StrCat("send to rank ", peer, " of ", size(), " with tag ", tag)));
  }
  return Work::done_with(comm_->send(
      peer, kPointToPoint | tag, Buffer::copy_of({static_cast<const std::byte*>(data), bytes})));
}

Work Group::recv_async(int peer, uint64_t tag, void* data, size_t bytes) {
  if (peer < 0 || peer >= size() || tag >= kMaxUserTag) {
    return Work::done_with(absl::InvalidArgumentError(
        absl::StrCat("recv from rank ", peer, " of ", size(), " with tag ", tag)));
  }
  return enqueue([=](Communicator& c) -> absl::Status {
    absl::StatusOr<Buffer> in = c.recv(peer, kPointToPoint | tag);
    if (!in.ok()) return in.status();
    if (in->size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer, " tag ", tag, ": ",
                                                     in->size(), " bytes arrived, ", bytes,
                                                     " expected"));
    }
    if (bytes > 0) std::memcpy(data, in->data(), bytes);
    return absl::OkStatus();
  });
}

void Group::abort(const absl::Status& why, const std::vector<int>& lost) {
  comm_->abort(why, lost);
}

}  // namespace troupe::transport
