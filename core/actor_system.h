// ActorSystem: spawns actors in this process and runs them on a thread pool.
//
//   troupe::ActorSystem system;                          // threads = cores
//   auto counter = system.spawn<Counter>({.name = "counter", .max_restarts = 3}, 0);
//   auto same = system.lookup<Counter>("counter");
//   system.monitor(*counter, [](ActorId id, const absl::Status& why) { ... });
//   system.kill(*counter);                               // as ray.kill
//
// Actors live until killed, until they fail with no restarts left, or until
// the system shuts down. Destroying the system shuts it down.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/actor_ref.h"
#include "core/actor_type.h"
#include "core/dedicated_thread.h"
#include "core/detail/actor_cell.h"
#include "core/ids.h"
#include "core/spawn_options.h"
#include "core/thread_pool.h"

namespace troupe {

// The id of the actor whose method is running on this thread (Ray's
// get_runtime_context().get_actor_id()); nullopt outside any actor.
std::optional<ActorId> this_actor_id();

struct ActorSystemOptions {
  // Pool threads; 0 means one per core.
  int threads = 0;
  // This process's node index, the high bits of every ActorId it creates.
  uint32_t node = 0;
  // Idle pool threads spin briefly before they sleep (ThreadPool): lower
  // latency for bursts, CPU burnt between messages that come a little apart.
  bool spin = true;
};

class ActorSystem {
 public:
  explicit ActorSystem(ActorSystemOptions options = {});
  // Shuts down: see shutdown().
  ~ActorSystem();
  ActorSystem(const ActorSystem&) = delete;
  ActorSystem& operator=(const ActorSystem&) = delete;

  // Constructs a T from copies of `args` and starts it. The copies are kept to
  // build a fresh instance on restart. A T that can fail to build declares a
  // factory for those arguments, which is used instead of a constructor:
  //   static absl::StatusOr<std::unique_ptr<T>> create(const A&...);
  // If T has
  //   void on_restart(const troupe::RestartInfo&)
  // it is called on each new instance after a restart.
  // Errors: AlreadyExists (name taken), the factory's error with its code
  // ("cannot spawn T: " before its message), InvalidArgument (a constructor
  // threw), FailedPrecondition (the system is shutting down).
  template <RegisteredActor T, class... A>
  absl::StatusOr<ActorRef<T>> spawn(SpawnOptions options, A&&... args) {
    static_assert((std::is_copy_constructible_v<std::decay_t<A>> && ...),
                  "spawn arguments are kept for restarts and must be copyable");
    detail::ActorBehavior behavior =
        detail::make_behavior<T>(std::make_tuple(std::decay_t<A>(std::forward<A>(args))...));
    auto cell = spawn_cell(actor_type_of<T>(), std::move(options), std::move(behavior));
    if (!cell.ok()) return cell.status();
    return ActorRef<T>(*std::move(cell));
  }

  // The live actor registered under `name`. Errors: NotFound, or
  // InvalidArgument if it is not a T.
  template <RegisteredActor T>
  absl::StatusOr<ActorRef<T>> lookup(std::string_view name) {
    auto cell = lookup_cell(name, actor_type_of<T>());
    if (!cell.ok()) return cell.status();
    return ActorRef<T>(*std::move(cell));
  }

  // Makes the actor fail after the message it is running, like ray.kill:
  // with `no_restart` it terminates and pending calls fail with ActorDied;
  // otherwise it restarts if it has restarts left (pending calls then run on
  // the new instance).
  template <class T>
  void kill(const ActorRef<T>& ref, bool no_restart = true) {
    if (ref.cell_) ref.cell_->kill(!no_restart, no_restart ? "kill()" : "kill(no_restart=false)");
  }

  // Calls `on_death(id, reason)` once, when the actor terminates for good (at
  // once if it already has), on the thread that terminated it.
  template <class T>
  void monitor(const ActorRef<T>& ref, DeathCallback on_death) {
    if (ref.cell_) ref.cell_->monitor(std::move(on_death));
  }

  // Kills every actor, waits for each to finish the message it is running,
  // and stops the threads. Calls and spawns after this fail. Idempotent.
  void shutdown();

  // Actors that have not terminated.
  size_t num_actors() const;
  // Sends that found their target's mailbox full and had to wait for room.
  uint64_t full_mailbox_waits() const {
    return full_mailbox_waits_.load(std::memory_order_relaxed);
  }
  ThreadPool& pool() { return *pool_; }

  // For the cluster runtime. Internal.
  //
  // Spawns an actor of `type` with the constructor whose signature is
  // `constructor`, its arguments decoded from `args`. With a valid `id` the
  // actor takes that id (an actor restarted here after its node was lost);
  // with restart.restart_count > 0 its on_restart(restart) runs before any
  // call. Errors: NotFound (no such constructor, naming those there are),
  // InvalidArgument (arguments malformed, constructor threw), AlreadyExists.
  absl::StatusOr<detail::IntrusivePtr<detail::ActorHandle>> spawn_remote(
      const ActorTypeInfo& type, SpawnOptions options, uint64_t constructor, Reader& args,
      ActorId id = {}, const RestartInfo& restart = {});
  // The live local actor with this id, or null.
  detail::IntrusivePtr<detail::ActorHandle> find(ActorId id) const;
  uint32_t node() const { return node_.load(std::memory_order_relaxed); }
  // Sets the node index for actors spawned from now on (a node learns its
  // index when it joins a cluster, after it started).
  void set_node(uint32_t node) { node_.store(node, std::memory_order_relaxed); }

  // Spawns a T with a given id (a node's well-known service actors). Internal.
  template <RegisteredActor T, class... A>
  absl::StatusOr<ActorRef<T>> spawn_at(ActorId id, SpawnOptions options, A&&... args) {
    auto cell = spawn_cell(
        actor_type_of<T>(), std::move(options),
        detail::make_behavior<T>(std::make_tuple(std::decay_t<A>(std::forward<A>(args))...)), id);
    if (!cell.ok()) return cell.status();
    return ActorRef<T>(*std::move(cell));
  }

  // Called by the runtime. Internal.
  void on_actor_terminated(ActorId id, const std::string& name);
  void on_full_mailbox() { full_mailbox_waits_.fetch_add(1, std::memory_order_relaxed); }

 private:
  absl::StatusOr<detail::IntrusivePtr<detail::ActorCell>> spawn_cell(const ActorTypeInfo& type,
                                                                     SpawnOptions options,
                                                                     detail::ActorBehavior behavior,
                                                                     ActorId fixed_id = {});
  absl::StatusOr<detail::IntrusivePtr<detail::ActorCell>> lookup_cell(std::string_view name,
                                                                      const ActorTypeInfo& type);
  void reap_dedicated_threads();

  const ActorSystemOptions options_;
  std::atomic<uint32_t> node_;
  std::unique_ptr<ThreadPool> pool_;
  std::atomic<uint64_t> full_mailbox_waits_{0};

  mutable std::mutex mu_;
  std::condition_variable all_terminated_;
  bool shutting_down_ = false;
  uint64_t next_sequence_ = 1;
  absl::flat_hash_map<ActorId, detail::IntrusivePtr<detail::ActorCell>> live_;
  absl::flat_hash_map<std::string, detail::IntrusivePtr<detail::ActorCell>> names_;
  absl::flat_hash_map<ActorId, std::unique_ptr<DedicatedThread>> dedicated_;
  std::vector<std::unique_ptr<DedicatedThread>> retired_;  // of terminated actors
};

}  // namespace troupe
