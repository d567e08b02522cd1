// What a caller waiting for a reply on a connection to another node may run
// meanwhile: the connection's transport, through transport::DirectIo. The
// reply then completes the caller's future on the caller's own thread, not
// handed over from the transport's I/O thread (see detail::WaitDriver).
#pragma once

#include <memory>
#include <utility>

#include "core/detail/wait_driver.h"
#include "transport/connection.h"
#include "transport/direct_io.h"

namespace troupe::cluster {

class ReplyDriver final : public troupe::detail::WaitDriver {
 public:
  // Null if `conn` offers no DirectIo. Otherwise the connection's callbacks
  // may run from now on on the threads that drive it, one at a time and in
  // order, as on the I/O thread (and, as there, they must not block).
  static std::shared_ptr<ReplyDriver> of(const std::shared_ptr<transport::Connection>& conn) {
    auto* io = dynamic_cast<transport::DirectIo*>(conn.get());
    if (io == nullptr) return nullptr;
    io->allow_driving();
    return std::make_shared<ReplyDriver>(conn, io);
  }

  ReplyDriver(std::shared_ptr<transport::Connection> conn, transport::DirectIo* io)
      : conn_(std::move(conn)), io_(io) {}

  void begin_driving() override { io_->begin_driving(); }
  bool poll() override { return io_->poll(); }
  void end_driving(bool blocking) override { io_->end_driving(blocking); }

 private:
  std::shared_ptr<transport::Connection> conn_;  // keeps io_ alive
  transport::DirectIo* const io_;
};

}  // namespace troupe::cluster
