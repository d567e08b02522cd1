// Running the worker. The progress thread runs it, and the commands other
// threads post to it, while no thread drives the worker itself; a thread
// driving it (DirectIo) runs it instead, the progress thread then
// standing back. Whoever runs it holds the worker lock.
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "transport/detail/cpu_relax.h"
#include "transport/ucx/detail/transport.h"

namespace troupe::transport::ucx {
namespace {

// Progress calls without events before the thread blocks on the worker's fd
// (tens of microseconds), yielding the core between them. Short, and polite,
// on purpose: a progress thread that spins for milliseconds holds a core that
// the actors answering the frames need - on a 2-core machine it cut
// cross-process call rates 3-6x - while a reply to a frame just sent comes
// back well within the budget.
constexpr int kSpinsBeforeSleep = 500;
// The first microsecond of idle calls does not yield: a sched_yield is a
// trip through the scheduler even when no other thread waits, and costs more
// than a shared-memory hop (it was most of the ucx round trip: 1.3-1.6 us
// with a yield after every call, 0.9-1.0 with 16 calls first, 0.55-0.85
// with 64). Not more: a poller that does not yield starves the threads that
// answer the frames on a host with fewer cores than busy threads - 64 calls
// (about 4 us) halved cluster_bench's cross-process call rate on two cores,
// 16 (about 1 us) did not. By the clock, not by a count of calls: a count
// is a time that moves with the loop's cost - when a turn got cheaper, 16
// turns ended before a reply came back, and the round trip doubled, the
// reply waiting behind a yield.
constexpr int64_t kSpinNanos = 1000;
constexpr int kClockEvery = 4;  // turns between clock reads while spinning
constexpr int kSleepMillis = 50;
// While threads drive the worker themselves the progress thread sleeps in
// steps this long: the most that work left to it can wait.
constexpr int kStandBackMillis = 1;

// Marks this thread as running `link`'s worker: a thread driving it while it
// holds the worker lock, the progress thread for its whole loop. Nested
// marks put back the one they found.
class Running {
 public:
  Running(const Link* link, bool driving)
      : outer_running_(std::exchange(tls_running, link)),
        outer_driving_(std::exchange(tls_driving, driving)) {}
  ~Running() {
    tls_running = outer_running_;
    tls_driving = outer_driving_;
  }
  Running(const Running&) = delete;
  Running& operator=(const Running&) = delete;

 private:
  const Link* outer_running_;
  bool outer_driving_;
};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void UcxTransport::enqueue(Command command) {
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    commands_.push_back(std::move(command));
    have_commands_.store(true, std::memory_order_seq_cst);
  }
  wake();
}

void UcxTransport::wake() {
  uint64_t one = 1;
  if (sleeping_.load(std::memory_order_seq_cst)) static_cast<void>(::write(wake_fd_, &one, 8));
}

bool UcxTransport::run_commands() {
  if (!have_commands_.load(std::memory_order_acquire)) return false;
  {
    std::lock_guard<std::mutex> lock(commands_mu_);
    running_.swap(commands_);
    have_commands_.store(false, std::memory_order_relaxed);
  }
  for (Command& c : running_) {
    if (c.fn) {
      c.fn();
    } else {
      send_now(c.session.get(), std::move(c.frame));
      c.session->queued.fetch_sub(1, std::memory_order_release);
    }
  }
  running_.clear();
  return true;
}

void UcxTransport::run() {
  pthread_setname_np(pthread_self(), "troupe-ucx");  // as top -H and perf show it
  {
    // Marked once for the whole loop, not each time round (four thread-local
    // writes a turn, each a __tls_get_addr call in a shared library): between
    // turns, without the lock, this thread runs nothing that reads the mark.
    Running running(link_.get(), /*driving=*/false);
    serve();
  }
  shut_down();
}

void UcxTransport::serve() {
  int idle = 0;
  bool spinning = false;  // idle, but not yet yielding
  int64_t spin_until = 0;
  while (!stopping_) {
    bool busy = false;
    {
      std::lock_guard<std::mutex> lock(worker_mu_);
      busy = run_commands();
      if (drivers_.load(std::memory_order_seq_cst) == 0) {
        while (ucp_worker_progress(worker_) != 0)
          busy = true;
      } else {
        // Threads driving the worker run it. Once per wake-up (a command, or
        // kStandBackMillis) this one does too, for connections that no
        // thread drives.
        ucp_worker_progress(worker_);
      }
      if (!retired_.empty()) retired_.clear();
    }
    if (busy) {
      idle = 0;
      continue;
    }
    if (drivers_.load(std::memory_order_seq_cst) == 0 && ++idle < kSpinsBeforeSleep) {
      if (idle == 1) {
        spinning = true;
        spin_until = now_ns() + kSpinNanos;
      } else if (spinning && idle % kClockEvery == 0) {
        spinning = now_ns() < spin_until;
      }
      if (spinning) {
        detail::cpu_relax();
      } else {
        sched_yield();  // any other thread of ours that can run goes first
      }
      continue;
    }
    idle = 0;
    sleep();
  }
}

void UcxTransport::shut_down() {
  // Every connection ends now.
  std::vector<std::shared_ptr<UcxSession>> sessions;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (auto& [id, s] : by_id_)
      sessions.push_back(s);
  }
  for (auto& s : sessions)
    drop(s, absl::UnavailableError("the transport is shutting down"));
  // Let closes and sends still in flight finish (bounded) before the worker goes.
  absl::Time until = absl::Now() + absl::Milliseconds(200);
  for (int quiet = 0; quiet < 1000 && absl::Now() < until;) {
    quiet = ucp_worker_progress(worker_) != 0 ? 0 : quiet + 1;
  }
}

void UcxTransport::sleep() {
  sleeping_.store(true, std::memory_order_seq_cst);
  if (!have_commands_.load(std::memory_order_seq_cst)) {
    if (drivers_.load(std::memory_order_seq_cst) > 0) {
      // Standing back: the drivers see to the worker, and the last to leave
      // wakes this thread if anything is left for it.
      pollfd fd = {wake_fd_, POLLIN, 0};
      ::poll(&fd, 1, kStandBackMillis);
    } else {
      bool armed = false;
      {
        std::lock_guard<std::mutex> lock(worker_mu_);
        armed = ucp_worker_arm(worker_) == UCS_OK;
      }
      if (armed) {
        pollfd fds[2] = {{worker_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
        ::poll(fds, 2, kSleepMillis);
      }
    }
    uint64_t drained;
    while (::read(wake_fd_, &drained, 8) == 8) {
    }
  }
  sleeping_.store(false, std::memory_order_seq_cst);
}

void UcxTransport::end_driving(bool blocking) {
  if (drivers_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
      (blocking || in_flight_.load(std::memory_order_seq_cst) > 0 ||
       have_commands_.load(std::memory_order_seq_cst))) {
    wake();
  }
}

bool UcxTransport::poll_once() {
  std::unique_lock<std::mutex> lock(worker_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  Running running(link_.get(), /*driving=*/true);
  bool any = ucp_worker_progress(worker_) != 0;
  if (!retired_.empty()) retired_.clear();
  return any;
}

bool UcxTransport::try_send_here(UcxSession* s, Frame& frame) {
  std::unique_lock<std::mutex> lock(worker_mu_, std::try_to_lock);
  if (!lock.owns_lock() || s->queued.load(std::memory_order_acquire) > 0) return false;
  {
    Running running(link_.get(), /*driving=*/true);
    send_now(s, std::move(frame));
    if (!retired_.empty()) retired_.clear();
  }
  lock.unlock();
  // A send that did not finish at once needs the worker run: if no thread
  // drives it, the progress thread must not sleep through that.
  if (in_flight_.load(std::memory_order_seq_cst) > 0 &&
      drivers_.load(std::memory_order_seq_cst) == 0) {
    wake();
  }
  return true;
}

}  // namespace troupe::transport::ucx
