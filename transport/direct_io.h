// What a connection may offer beyond Connection to the threads that consume
// its frames (a Communicator's; a node's callers waiting for replies), so
// that bytes reach them with less handing over:
//
// Driving. The waiting thread runs the transport's I/O itself. Otherwise
// every frame is handed over from the transport's I/O thread to the waiting
// one: a wake-up per frame, and on a small machine a core that both threads
// want. (MPI waits this way.) The transport's own I/O thread stands back
// meanwhile, so that the two do not spin against each other. Connections of
// other users of the transport are unaffected: their callbacks still run on
// the I/O thread only.
//
// Placement. The consumer says where a large incoming buffer lands (its
// final place, say), instead of receiving it into the transport's buffer and
// copying it there.
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "transport/buffer.h"

namespace troupe::transport {

class DirectIo {
 public:
  // Lets this connection's callbacks run on a thread that drives its
  // transport (one call at a time and in order, as before). Until then they
  // run on the transport's I/O thread only.
  virtual void allow_driving() = 0;

  // The calling thread is about to drive the transport (poll() in a loop):
  // the I/O thread stands back until every such thread has called
  // end_driving(). Calls from several threads add up.
  virtual void begin_driving() = 0;
  // Ends it. The I/O thread takes over again at once if the transport has
  // anything in flight or `blocking` (the thread is about to block, waiting
  // for what the I/O thread will deliver); otherwise within a millisecond.
  virtual void end_driving(bool blocking) = 0;

  // Runs the transport's I/O once on the calling thread, unless another
  // thread is running it now. Callbacks of connections that allowed it run
  // here. Returns whether anything happened.
  // REQUIRES: between this thread's begin_driving() and end_driving().
  virtual bool poll() = 0;

  // Chooses where buffers of incoming frames land. For each buffer that
  // arrives apart from its frame's start (large ones), place(earlier, bytes)
  // is called, where callbacks run, with the frame's buffers before it, all
  // complete; it returns a buffer of exactly `bytes` to land in, or an empty
  // one to leave it to the transport. A buffer it returns is the frame's from
  // then on: released with the frame, or when the connection drops it.
  using Placement = std::function<Buffer(std::span<const Buffer> earlier, size_t bytes)>;
  virtual void set_placement(Placement place) = 0;

 protected:
  ~DirectIo() = default;
};

}  // namespace troupe::transport
