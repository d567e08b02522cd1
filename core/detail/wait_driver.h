// What a thread waiting for a future may run while it waits, so that what
// completes the future reaches it without a hand-off from another thread.
// Internal to core.
//
// A remote call's reply arrives on a transport whose I/O thread would hand it
// to the waiting thread: a wake-up per call, and on a small host a core that
// both threads want. A caller that runs the transport's I/O itself while it
// waits (as MPI waits, and as the collectives' threads do) completes its own
// future, and the I/O thread stands back meanwhile.
#pragma once

namespace troupe::detail {

class WaitDriver {
 public:
  virtual ~WaitDriver() = default;
  // The calling thread is about to call poll() in a loop; the transport's
  // own I/O thread stands back until end_driving().
  virtual void begin_driving() = 0;
  // Runs the transport's I/O once on the calling thread (callbacks that
  // complete futures run here). Returns whether anything happened.
  // REQUIRES: between this thread's begin_driving() and end_driving().
  virtual bool poll() = 0;
  // `blocking`: the thread is about to block, waiting for what the I/O
  // thread will deliver, which must then take over at once.
  virtual void end_driving(bool blocking) = 0;
};

}  // namespace troupe::detail
