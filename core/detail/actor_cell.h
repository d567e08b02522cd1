// The runtime side of one actor: its mailbox, its current instance, its
// restart policy and its monitors. Internal to core; users hold ActorRef<T>.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/actor_type.h"
#include "core/detail/actor_behavior.h"
#include "core/detail/actor_handle.h"
#include "core/detail/mailbox.h"
#include "core/detail/message.h"
#include "core/executor.h"
#include "core/ids.h"
#include "core/spawn_options.h"

namespace troupe {
class ActorSystem;
}

namespace troupe::detail {

class ActorCell final : public ActorHandle, public Resumable {
 public:
  // The cell owns `instance` (made by behavior.create) and runs on `executor`.
  ActorCell(ActorSystem* system, ActorId id, const ActorTypeInfo& type, SpawnOptions options,
            ActorBehavior behavior, void* instance, Executor* executor);

  ActorId id() const override { return id_; }
  const ActorTypeInfo& type() const override { return type_; }
  const std::string& name() const { return options_.name; }

  // Enqueues a user message, blocking while the mailbox is full. If the actor
  // is gone or the wait times out, rejects `m` with the reason.
  void send(Message* m) override;
  // Enqueues without back-pressure (replies, continuations, control).
  void post_internal(Message* m) override;

  // Makes the actor fail after its current message: restarted if `restart`
  // and restarts remain, otherwise terminated. Pending messages survive a
  // restart and are rejected on termination.
  void kill(bool restart, std::string reason) override;
  // kill() in two halves: the request, which the actor honours before its
  // next message, and the wake-up that makes an idle actor see it.
  // ActorSystem::shutdown requests every kill before any actor can run
  // another message, then wakes them.
  void request_kill(bool restart, std::string reason);
  void wake_for_kill();

  // Calls `cb` once when the actor terminates (at once if it already has).
  void monitor(DeathCallback cb) override;

  bool terminated() const { return terminated_.load(std::memory_order_acquire); }

  // Resumable: runs a batch of messages on the executor.
  void resume() override;

 private:
  ~ActorCell() override;

  // Spins a few microseconds for room in the mailbox; true if it appeared.
  bool wait_briefly_for_space();
  // Blocks until there is room or send_timeout passes; false on timeout.
  bool block_for_space();
  void enqueue(Message* m);
  void schedule();
  void process(Message* m);
  void fail(absl::Status reason);
  void restart_or_terminate(absl::Status reason);
  void terminate(absl::Status reason);
  std::string describe() const;

  ActorSystem* const system_;
  const ActorId id_;
  const ActorTypeInfo& type_;
  const SpawnOptions options_;
  const ActorBehavior behavior_;
  Executor* const executor_;

  Mailbox mailbox_;

  // Owned by the thread running the actor.
  void* instance_;
  int restarts_ = 0;

  std::atomic<bool> kill_requested_{false};
  std::atomic<bool> terminated_{false};
  std::mutex mu_;  // guards the fields below
  bool kill_restart_ = false;
  std::string kill_reason_;
  absl::Status death_reason_;
  std::vector<DeathCallback> monitors_;
};

}  // namespace troupe::detail
