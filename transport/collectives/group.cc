#include "transport/collectives/group.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "transport/collectives/detail/steps.h"

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

Work Group::enqueue(Kind kind, std::function<absl::Status(Communicator&)> run, bool collective) {
  Op op{std::move(run), Work(), kind};
  Work work = op.work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
  }
  if (collective) collectives_issued_.fetch_add(1);
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
    // Signed: a point-to-point send counted on one side and not yet on the
    // other may straddle the operation (metrics only; clamped).
    const auto net_sent = [&] {
      return static_cast<int64_t>(comm_->bytes_sent()) -
             static_cast<int64_t>(point_to_point_sent_.load());
    };
    const int64_t sent_before = net_sent();
    absl::Status s = op.run(*comm_);
    const auto sent = static_cast<uint64_t>(std::max<int64_t>(0, net_sent() - sent_before));
    {
      std::lock_guard<std::mutex> lock(mu_);
      running_ = false;
      switch (op.kind) {
        case Kind::kAllreduce:
          traffic_.allreduce += sent;
          break;
        case Kind::kReduceScatter:
          traffic_.reduce_scatter += sent;
          break;
        case Kind::kAllgather:
          traffic_.allgather += sent;
          break;
        case Kind::kOther:
          traffic_.other += sent;
          break;
      }
    }
    op.work.finish(std::move(s));
  }
}

Work Group::allreduce_async(DType type, ReduceOp op, void* data, size_t count,
                            Algorithm algorithm) {
  return enqueue(Kind::kAllreduce, [=](Communicator& c) {
    return transport::allreduce(c, type, op, data, count, algorithm);
  });
}

Work Group::reduce_scatter_async(DType type, ReduceOp op, const void* input, void* output,
                                 size_t count) {
  return enqueue(Kind::kReduceScatter, [=](Communicator& c) {
    return transport::reduce_scatter(c, type, op, input, output, count);
  });
}

Work Group::reduce_scatter_v_async(DType type, ReduceOp op, const void* input, void* output,
                                   std::span<const size_t> counts) {
  return enqueue(Kind::kReduceScatter,
                 [=, counts = std::vector<size_t>(counts.begin(), counts.end())](Communicator& c) {
                   return transport::reduce_scatter_v(c, type, op, input, output, counts);
                 });
}

Work Group::allgather_v_async(const void* input, void* output, std::span<const size_t> bytes) {
  return enqueue(Kind::kAllgather,
                 [=, bytes = std::vector<size_t>(bytes.begin(), bytes.end())](Communicator& c) {
                   return transport::allgather_v(c, input, output, bytes);
                 });
}

Work Group::allgather_async(const void* input, void* output, size_t bytes) {
  return enqueue(Kind::kAllgather,
                 [=](Communicator& c) { return transport::allgather(c, input, output, bytes); });
}

Work Group::broadcast_async(void* data, size_t bytes, int root) {
  return enqueue(Kind::kOther,
                 [=](Communicator& c) { return transport::broadcast(c, data, bytes, root); });
}

Work Group::barrier_async() {
  return enqueue(Kind::kOther, [](Communicator& c) { return transport::barrier(c); });
}

absl::Status Group::check_point_to_point(const char* what, int peer, uint64_t tag) const {
  if (peer >= 0 && peer < size() && tag < kMaxUserTag) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " rank ", peer, " of ", size(), " with tag ", tag));
}

absl::Status Group::post(int peer, uint64_t tag, Buffer data) {
  const size_t bytes = data.size();
  const bool counted = peer != rank();  // a send to itself sends nothing
  if (counted) point_to_point_sent_.fetch_add(bytes);
  absl::Status sent = comm_->send(peer, kPointToPoint | tag, std::move(data));
  if (sent.ok() && counted) {
    std::lock_guard<std::mutex> lock(mu_);
    traffic_.other += bytes;
  } else if (counted) {
    point_to_point_sent_.fetch_sub(bytes);
  }
  return sent;
}

Work Group::send_async(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (absl::Status s = check_point_to_point("send to", peer, tag); !s.ok()) {
    return Work::done_with(std::move(s));
  }
  return Work::done_with(
      post(peer, tag, Buffer::copy_of({static_cast<const std::byte*>(data), bytes})));
}

Work Group::send_borrowed_async(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (absl::Status s = check_point_to_point("send to", peer, tag); !s.ok()) {
    return Work::done_with(std::move(s));
  }
  // The Work finishes when the last holder of the memory lets go: the
  // transport, or this call if the send failed (with that failure).
  struct Lent {
    Work work;
    absl::Status status;
  };
  auto lent = std::shared_ptr<Lent>(new Lent, [](Lent* l) {
    l->work.finish(std::move(l->status));
    delete l;
  });
  Work work = lent->work;
  absl::Status sent = post(
      peer, tag, Buffer::borrow(lent, static_cast<std::byte*>(const_cast<void*>(data)), bytes));
  if (!sent.ok()) lent->status = std::move(sent);
  return work;  // `lent` goes here; the transport's copy of it may live on
}

Work Group::recv_async(int peer, uint64_t tag, void* data, size_t bytes) {
  return receive(peer, tag, data, bytes, /*in_place=*/false);
}

Work Group::recv_in_place_async(int peer, uint64_t tag, void* data, size_t bytes) {
  return receive(peer, tag, data, bytes, /*in_place=*/true);
}

Work Group::receive(int peer, uint64_t tag, void* data, size_t bytes, bool in_place) {
  if (absl::Status s = check_point_to_point("recv from", peer, tag); !s.ok()) {
    return Work::done_with(std::move(s));
  }
  const uint64_t wire_tag = kPointToPoint | tag;
  // In place: `data`, lent to the transport as the place for the payload
  // until it lets go.
  std::shared_ptr<detail::BorrowedSends> target;
  if (in_place && bytes > 0) {
    target = std::make_shared<detail::BorrowedSends>(*comm_);
    comm_->place(peer, wire_tag, target->borrow(data, bytes));
  }
  return enqueue(
      Kind::kOther,
      [=, this](Communicator& c) -> absl::Status {
        absl::Status status;
        {
          absl::StatusOr<Buffer> in = c.recv(peer, wire_tag);
          if (!in.ok()) {
            status = in.status();
          } else if (in->size() != bytes) {
            status = absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer, " tag ", tag,
                                                             ": ", in->size(), " bytes arrived, ",
                                                             bytes, " expected"));
          } else if (bytes > 0 && in->data() == data) {
            received_in_place_.fetch_add(bytes);
          } else if (bytes > 0) {
            std::memcpy(data, in->data(), bytes);
          }
        }  // a payload placed in `data` lets go of it here
        if (target == nullptr) return status;
        // Unused, the target goes, so that no later message lands in `data`.
        c.unplace(peer, wire_tag, data);
        if (absl::Status drained = target->wait(c.timeout()); !drained.ok()) {
          // A payload still landing in `data` long after its receive gave
          // up: the connection goes, and with it the transport's hold on it.
          c.abort(drained, {peer});
          static_cast<void>(target->wait(c.timeout()));
          if (status.ok()) status = drained;
        }
        return status;
      },
      /*collective=*/false);
}

Traffic Group::traffic() const {
  std::lock_guard<std::mutex> lock(mu_);
  return traffic_;
}

void Group::abort(const absl::Status& why, const std::vector<int>& lost) {
  comm_->abort(why, lost);
}

}  // namespace troupe::transport
