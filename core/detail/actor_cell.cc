#include "core/detail/actor_cell.h"

#include <cxxabi.h>

#include <exception>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "core/actor_system.h"
#include "core/detail/futex.h"
#include "core/status.h"
#include "spdlog/spdlog.h"

namespace troupe::detail {
namespace {

// Messages run per resume() before the actor yields its thread.
constexpr int kMessagesPerResume = 128;
// Rounds of 16 pauses a sender spins on a full mailbox before it blocks.
constexpr int kSpinForSpace = 256;

thread_local ActorCell* tl_current_actor = nullptr;

// Swaps the thread's current actor for the scope of one resume().
class CurrentActorScope {
 public:
  explicit CurrentActorScope(ActorCell* cell) : previous_(tl_current_actor) {
    tl_current_actor = cell;
  }
  ~CurrentActorScope() { tl_current_actor = previous_; }

 private:
  ActorCell* previous_;
};

// Wakes an idle actor so that it notices a kill request.
class Wakeup final : public Message {
 public:
  void deliver(void*) override { delete this; }
  void reject(const absl::Status&) override { delete this; }
};

std::string demangled(const char* mangled) {
  int status = 0;
  char* name = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string result = status == 0 && name != nullptr ? name : mangled;
  std::free(name);
  return result;
}

// "std::runtime_error: what" for the exception being handled.
std::string describe_current_exception() {
  std::exception_ptr e = std::current_exception();
  std::type_info* type = abi::__cxa_current_exception_type();
  std::string type_name = type ? demangled(type->name()) : "unknown exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return absl::StrCat(type_name, ": ", ex.what());
  } catch (...) {
    return type_name;
  }
}

}  // namespace

MessageTarget* current_actor() {
  return tl_current_actor;
}

ActorCell::ActorCell(ActorSystem* system, ActorId id, const ActorTypeInfo& type,
                     SpawnOptions options, ActorBehavior behavior, void* instance,
                     Executor* executor)
    : system_(system),
      id_(id),
      type_(type),
      options_(std::move(options)),
      behavior_(std::move(behavior)),
      executor_(executor),
      instance_(instance) {}

ActorCell::~ActorCell() {
  if (instance_ != nullptr) behavior_.destroy(instance_);
}

std::string ActorCell::describe() const {
  if (options_.name.empty()) return absl::StrCat(type_.name, " ", to_string(id_));
  return absl::StrCat(type_.name, " '", options_.name, "' ", to_string(id_));
}

void ActorCell::send(Message* m) {
  // Self-sends skip back-pressure: an actor waiting for room in its own
  // mailbox would wait forever.
  if (mailbox_.backlog() >= options_.mailbox_capacity && tl_current_actor != this) {
    system_->on_full_mailbox();
    if (!wait_briefly_for_space() && !block_for_space()) {
      m->reject(absl::ResourceExhaustedError(absl::StrCat(
          "mailbox of actor ", describe(), " stayed full (capacity ", options_.mailbox_capacity,
          ") for ", absl::FormatDuration(options_.send_timeout))));
      return;
    }
  }
  mailbox_.count_push();
  enqueue(m);
}

bool ActorCell::block_for_space() {
  absl::Time deadline = options_.send_timeout == absl::InfiniteDuration()
                            ? absl::InfiniteFuture()
                            : absl::Now() + options_.send_timeout;
  BlockingRegion region;
  // A closed mailbox counts as room: enqueue() then rejects with the reason.
  return mailbox_.wait_for_space(options_.mailbox_capacity, deadline) !=
         Mailbox::SpaceResult::kTimedOut;
}

bool ActorCell::wait_briefly_for_space() {
  // The consumer takes its whole mailbox at once, so room usually appears
  // within microseconds; spinning here avoids a sleep and a wake-up.
  for (int i = 0; i < kSpinForSpace; ++i) {
    for (int j = 0; j < 16; ++j)
      cpu_relax();
    if (mailbox_.backlog() < options_.mailbox_capacity) return true;
  }
  return false;
}

void ActorCell::post_internal(Message* m) {
  mailbox_.count_push();
  enqueue(m);
}

void ActorCell::enqueue(Message* m) {
  switch (mailbox_.push(m)) {
    case Mailbox::PushResult::kQueued:
      return;
    case Mailbox::PushResult::kQueuedWasIdle:
      schedule();
      return;
    case Mailbox::PushResult::kClosed: {
      absl::Status why;
      {
        std::lock_guard<std::mutex> lock(mu_);
        why = death_reason_;
      }
      m->reject(why);
      return;
    }
  }
}

void ActorCell::schedule() {
  add_ref();  // held while scheduled; released when resume() goes idle
  executor_->schedule(this);
}

void ActorCell::kill(bool restart, std::string reason) {
  request_kill(restart, std::move(reason));
  wake_for_kill();
}

void ActorCell::request_kill(bool restart, std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  // A request to terminate is never weakened into a restart.
  if (!kill_requested_.load(std::memory_order_relaxed) || !restart) kill_restart_ = restart;
  kill_reason_ = std::move(reason);
  kill_requested_.store(true, std::memory_order_release);
}

void ActorCell::wake_for_kill() {
  post_internal(new Wakeup);
}

void ActorCell::monitor(DeathCallback cb) {
  absl::Status reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!terminated_.load(std::memory_order_relaxed)) {
      monitors_.push_back(std::move(cb));
      return;
    }
    reason = death_reason_;
  }
  cb(id_, reason);
}

void ActorCell::resume() {
  {
    CurrentActorScope scope(this);
    for (int i = 0; i < kMessagesPerResume && !terminated(); ++i) {
      if (kill_requested_.load(std::memory_order_acquire)) {
        bool restart;
        std::string reason;
        {
          std::lock_guard<std::mutex> lock(mu_);
          restart = kill_restart_;
          reason = std::move(kill_reason_);
          kill_requested_.store(false, std::memory_order_relaxed);
        }
        absl::Status status =
            ActorDiedError(absl::StrCat("actor ", describe(), " was killed: ", reason));
        if (restart) {
          restart_or_terminate(status);
        } else {
          terminate(status);
        }
        continue;
      }
      Message* m = mailbox_.pop();
      if (m == nullptr) break;
      process(m);
    }
  }
  if (terminated() || mailbox_.try_idle()) {
    release();  // the scheduling reference
    return;
  }
  executor_->schedule(this);  // more mail: stay scheduled, yield the thread
}

void ActorCell::process(Message* m) {
  std::string failure;
  try {
    m->deliver(instance_);
    return;
  } catch (...) {
    std::string method(m->method_name());
    failure = absl::StrCat(method.empty() ? "a continuation" : method, " threw ",
                           describe_current_exception());
  }
  absl::Status status = ActorDiedError(absl::StrCat("actor ", describe(), " died: ", failure));
  m->reject(status);  // the caller of the failing method learns why
  restart_or_terminate(std::move(status));
}

void ActorCell::restart_or_terminate(absl::Status reason) {
  if (instance_ != nullptr) {
    behavior_.destroy(instance_);
    instance_ = nullptr;
  }
  while (options_.max_restarts < 0 || restarts_ < options_.max_restarts) {
    ++restarts_;
    spdlog::warn("{}; restarting ({}/{})", std::string(reason.message()), restarts_,
                 options_.max_restarts < 0 ? std::string("unlimited")
                                           : std::to_string(options_.max_restarts));
    try {
      absl::StatusOr<void*> made = behavior_.create();
      if (!made.ok()) {
        reason = ActorDiedError(absl::StrCat("actor ", describe(), " died: restart ", restarts_,
                                             " failed: ", made.status().message()));
        continue;
      }
      instance_ = *made;
      if (behavior_.on_restart != nullptr) {
        behavior_.on_restart(instance_, RestartInfo{restarts_, reason});
      }
      return;
    } catch (...) {
      if (instance_ != nullptr) {
        behavior_.destroy(instance_);
        instance_ = nullptr;
      }
      reason = ActorDiedError(absl::StrCat("actor ", describe(), " died: restart ", restarts_,
                                           " failed: ", describe_current_exception()));
    }
  }
  terminate(std::move(reason));
}

void ActorCell::terminate(absl::Status reason) {
  if (instance_ != nullptr) {
    behavior_.destroy(instance_);
    instance_ = nullptr;
  }
  std::vector<DeathCallback> monitors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    death_reason_ = reason;
    terminated_.store(true, std::memory_order_release);
    monitors.swap(monitors_);
  }
  for (Message* m = mailbox_.close(); m != nullptr;) {
    Message* next = m->next_;
    m->reject(reason);
    m = next;
  }
  spdlog::debug("actor {} terminated: {}", describe(), std::string(reason.message()));
  system_->on_actor_terminated(id_, options_.name);
  for (DeathCallback& cb : monitors)
    cb(id_, reason);
}

}  // namespace troupe::detail

namespace troupe {

std::optional<ActorId> this_actor_id() {
  if (detail::tl_current_actor == nullptr) return std::nullopt;
  return detail::tl_current_actor->id();
}

}  // namespace troupe
