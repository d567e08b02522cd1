#include "trainers/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace troupe::trainers {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

void on_signal(int sig) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    static constexpr char kNote[] =
        "\ntroupe train: stopping after the step in flight, with a checkpoint (again to stop "
        "at once)\n";
    static_cast<void>(::write(2, kNote, sizeof(kNote) - 1));
    return;
  }
  // The second: the signal's default action, now.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_previous_int);
  ::sigaction(SIGTERM, &sa, &g_previous_term);
}

InterruptGuard::~InterruptGuard() {
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
}

int InterruptGuard::signal() const {
  return g_signal.load();
}

}  // namespace troupe::trainers
