// Internal to transport/ucx: one ucx connection (UcxSession), and how it
// reaches the transport that runs it (Link). Its methods are in session.cc;
// the transport's side is in detail/transport.h.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "transport/detail/session.h"
#include "transport/direct_io.h"

namespace troupe::transport::ucx {

class UcxTransport;

// How sessions reach their transport; cleared when it goes. Sends and
// closes post to it under `mu`. Threads that drive the transport (see
// DirectIo) visit it through `live` instead, lock-free: the
// transport waits for the visitors to leave before it goes.
struct Link {
  std::mutex mu;
  UcxTransport* transport = nullptr;
  std::atomic<UcxTransport*> live{nullptr};
  std::atomic<int> visitors{0};

  // Runs fn(transport) unless the transport is going or gone.
  template <class Fn>
  void visit(Fn fn) {
    visitors.fetch_add(1, std::memory_order_seq_cst);
    if (UcxTransport* t = live.load(std::memory_order_seq_cst)) fn(*t);
    visitors.fetch_sub(1, std::memory_order_seq_cst);
  }
};

// The link whose worker this thread is running now - a thread driving it,
// while it holds the worker lock, or the progress thread, for its whole loop
// (between turns it runs nothing that reads this) - and whether it is a
// thread driving it rather than the progress thread.
inline thread_local const Link* tls_running = nullptr;
inline thread_local bool tls_driving = false;

class UcxSession final : public detail::Session, public DirectIo {
 public:
  UcxSession(Role role, const TransportOptions& options, std::shared_ptr<TransportStats> stats,
             std::string name, std::shared_ptr<Link> link, uint64_t id)
      : Session(role, options, std::move(stats), std::move(name)), id(id), link_(std::move(link)) {}

  const uint64_t id;
  std::shared_ptr<Connection> side;  // the side channel; set once, before use
  // Frames posted to the progress thread and not yet sent: a send from
  // another thread may go straight out only when there are none.
  std::atomic<int> queued{0};
  // Whether callbacks may run on a thread driving the transport.
  std::atomic<bool> driving_allowed{false};

  // Worker lock holder only.
  ucp_ep_h ep = nullptr;
  uint64_t peer_id = 0;
  bool gone = false;        // dropped; ignore further traffic
  bool flushing = false;    // gone by a close that lets queued sends go out first
  std::vector<Frame> held;  // frames sent before the endpoint existed
  // Larger frames whose sends UCX has not finished (their SendOps hold them).
  // A session that ends at once empties them: with the endpoint gone no one
  // reads them any more, and their buffers may be lent (a collective's, which
  // it waits for) - even when UCX never completes a request the close
  // cancelled.
  std::vector<std::weak_ptr<Frame>> sending;

  // Frames whose bytes are still arriving, in the order they were sent: a
  // small frame behind a large rendezvous one waits for it.
  struct Incoming {
    struct Part {
      int buffer;  // which of frame.buffers, or kMessage
      size_t bytes;
    };
    static constexpr int kMessage = -1;
    Frame frame;  // buffers still to arrive are empty until they do
    std::vector<Part> parts;
    size_t next_part = 0;   // parts announced so far
    size_t parts_done = 0;  // parts fully received
    bool complete = false;
  };
  // Shared with a rendezvous receive in flight, which keeps its part's
  // buffer alive until UCX lets go of it; emptied when the session ends, so
  // that buffers lent by placement go back to their owner (a collective
  // waits for them) even though the frame will never be whole.
  std::deque<std::shared_ptr<Incoming>> incoming;
  DirectIo::Placement placement;  // set under the worker lock

  // Where the part about to arrive lands: the frame's message, or a buffer
  // that placement chooses or the transport allocates.
  std::byte* land(Incoming& in, const Incoming::Part& part) {
    if (part.buffer == Incoming::kMessage) return in.frame.message.data();
    Buffer& b = in.frame.buffers[static_cast<size_t>(part.buffer)];
    // Placement sees only complete buffers before this one.
    if (placement && in.parts_done + 1 == in.next_part) {
      b = placement({in.frame.buffers.data(), static_cast<size_t>(part.buffer)}, part.bytes);
      if (b.size() != part.bytes) b = Buffer();
    }
    if (b.empty()) b = Buffer(part.bytes);
    return b.data();
  }

  // What the session's callbacks are told, from whichever thread runs the
  // worker - or, on a driving thread that the session has not allowed, in
  // order through the progress thread (see `deferred`).
  // The frame is lent, as to the callbacks; a deferred one is moved out.
  void hand_up_frame(Frame& frame) {
    if (may_hand_up_here()) {
      on_frame_received(frame);
    } else {
      defer({Event::kFrame, std::move(frame), absl::OkStatus()});
    }
  }
  void hand_up_bad_frame(absl::Status why) {
    if (may_hand_up_here()) {
      on_bad_frame(why);
    } else {
      defer({Event::kBadFrame, Frame(), std::move(why)});
    }
  }
  void hand_up_closed(absl::Status why) {
    if (may_hand_up_here()) {
      on_channel_closed(std::move(why));
    } else {
      defer({Event::kClosed, Frame(), std::move(why)});
    }
  }
  // Progress thread: hands up what was deferred.
  void flush_deferred();

  // DirectIo.
  void allow_driving() override { driving_allowed.store(true, std::memory_order_release); }
  void begin_driving() override;
  void end_driving(bool blocking) override;
  bool poll() override;
  void set_placement(Placement place) override;

  void deliver_completed() {
    while (!incoming.empty() && incoming.front()->complete) {
      Frame f = std::move(incoming.front()->frame);
      incoming.pop_front();
      if (absl::Status s = validate_message(f.message, options().limits); !s.ok()) {
        hand_up_bad_frame(s);
        incoming.clear();
        return;
      }
      hand_up_frame(f);
    }
  }

 protected:
  absl::Status write_frame(Frame&& frame) override;
  void shutdown_channel() override;
  void drop_channel() override;

 private:
  struct Event {
    enum Kind { kFrame, kBadFrame, kClosed } kind;
    Frame frame;
    absl::Status status;
  };

  bool may_hand_up_here() {
    if (!tls_driving) {
      if (!deferred_.empty()) flush_deferred();  // the progress thread: what waited goes first
      return true;
    }
    return deferred_.empty() && driving_allowed.load(std::memory_order_acquire);
  }
  void defer(Event event);

  std::shared_ptr<Link> link_;
  std::deque<Event> deferred_;  // worker lock holder only
  bool flush_posted_ = false;   // worker lock holder only
};

}  // namespace troupe::transport::ucx
