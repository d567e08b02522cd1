#include "trainers/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"

namespace troupe::trainers {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};

// `text` as one shell word.
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && text.find_first_not_of(
                                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_./:=,+-@%") == std::string::npos;
  if (plain) return text;
  return absl::StrCat("'", absl::StrReplaceAll(text, {{"'", "'\\''"}}), "'");
}

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

std::string resume_command(const std::vector<std::string>& args) {
  std::vector<std::string> words = {"troupe", "train"};
  for (const std::string& arg : args)
    words.push_back(shell_word(arg));
  if (std::find(args.begin(), args.end(), "--resume") == args.end()) words.push_back("--resume");
  return absl::StrJoin(words, " ");
}

}  // namespace troupe::trainers
