#include "core/actor_system.h"

#include <thread>

#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/codec.h"
#include "core/status.h"
#include "spdlog/spdlog.h"

namespace troupe {

namespace {
int default_threads(int requested) {
  if (requested > 0) return requested;
  unsigned cores = std::thread::hardware_concurrency();
  return cores == 0 ? 1 : static_cast<int>(cores);
}
}  // namespace

ActorSystem::ActorSystem(ActorSystemOptions options)
    : options_(options),
      node_(options.node),
      pool_(std::make_unique<ThreadPool>(default_threads(options.threads), 0, options.spin)) {
  spdlog::default_logger_raw();  // create the logger before actor threads race to
}

ActorSystem::~ActorSystem() {
  shutdown();
}

absl::StatusOr<detail::IntrusivePtr<detail::ActorCell>> ActorSystem::spawn_cell(
    const ActorTypeInfo& type, SpawnOptions options, detail::ActorBehavior behavior,
    ActorId fixed_id) {
  reap_dedicated_threads();
  ActorId id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot spawn ", type.name, ": the actor system is shutting down"));
    }
    if (!options.name.empty()) {
      auto it = names_.find(options.name);
      if (it != names_.end()) {
        return absl::AlreadyExistsError(absl::StrCat("actor name '", options.name, "' is taken by ",
                                                     it->second->type().name, " ",
                                                     to_string(it->second->id())));
      }
    }
    if (fixed_id.valid()) {
      if (live_.contains(fixed_id)) {
        return absl::AlreadyExistsError(absl::StrCat(to_string(fixed_id), " already lives here"));
      }
      id = fixed_id;
    } else {
      id = ActorId::make(node_.load(std::memory_order_relaxed), next_sequence_++);
    }
  }
  if (options.mailbox_capacity == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot spawn ", type.name, ": mailbox_capacity must be at least 1"));
  }

  void* instance = nullptr;
  try {
    absl::StatusOr<void*> made = behavior.create();
    if (!made.ok()) {
      return absl::Status(made.status().code(),
                          absl::StrCat("cannot spawn ", type.name, ": ", made.status().message()));
    }
    instance = *made;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("constructor of ", type.name, " threw: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError(
        absl::StrCat("constructor of ", type.name, " threw a non-std exception"));
  }

  std::unique_ptr<DedicatedThread> thread;
  Executor* executor = pool_.get();
  if (options.dedicated_thread) {
    thread = std::make_unique<DedicatedThread>();
    executor = thread.get();
  }
  std::string name = options.name;
  auto cell = detail::IntrusivePtr<detail::ActorCell>::adopt(new detail::ActorCell(
      this, id, type, std::move(options), std::move(behavior), instance, executor));

  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_ || (!name.empty() && names_.contains(name))) {
    // Lost a race with shutdown() or another spawn of the same name.
    return absl::AbortedError(
        absl::StrCat("spawn of ", type.name, " raced with ",
                     shutting_down_ ? "shutdown" : "another spawn of '" + name + "'"));
  }
  live_.emplace(id, cell);
  if (!name.empty()) names_.emplace(name, cell);
  if (thread) dedicated_.emplace(id, std::move(thread));
  return cell;
}

absl::StatusOr<detail::IntrusivePtr<detail::ActorCell>> ActorSystem::lookup_cell(
    std::string_view name_view, const ActorTypeInfo& type) {
  absl::string_view name(name_view.data(), name_view.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = names_.find(name);
  if (it == names_.end())
    return absl::NotFoundError(absl::StrCat("no live actor named '", name, "'"));
  if (&it->second->type() != &type) {
    return absl::InvalidArgumentError(
        absl::StrCat("actor '", name, "' is a ", it->second->type().name, ", not a ", type.name));
  }
  return it->second;
}

namespace {

// Runs a restarted actor's on_restart() as its first message.
class RestartNotice final : public detail::Message {
 public:
  RestartNotice(void (*on_restart)(void*, const RestartInfo&), RestartInfo info)
      : on_restart_(on_restart), info_(std::move(info)) {}
  void deliver(void* instance) override {
    on_restart_(instance, info_);
    delete this;
  }
  void reject(const absl::Status&) override { delete this; }

 private:
  void (*on_restart_)(void*, const RestartInfo&);
  RestartInfo info_;
};

}  // namespace

absl::StatusOr<detail::IntrusivePtr<detail::ActorHandle>> ActorSystem::spawn_remote(
    const ActorTypeInfo& type, SpawnOptions options, uint64_t constructor, Reader& args, ActorId id,
    const RestartInfo& restart) {
  const ConstructorInfo* c = find_constructor(type, constructor);
  if (c == nullptr) {
    std::vector<std::string> known = constructor_signatures(type);
    return absl::NotFoundError(
        absl::StrCat(type.name, " has no constructor registered for these arguments; it has ",
                     known.empty() ? std::string("none") : absl::StrJoin(known, ", "),
                     " (add TROUPE_ACTOR_CONSTRUCTOR(", type.name, ", <parameter types>))"));
  }
  absl::StatusOr<detail::ActorBehavior> behavior = c->make(args);
  if (!behavior.ok()) return behavior.status();
  auto on_restart = behavior->on_restart;
  auto cell = spawn_cell(type, std::move(options), *std::move(behavior), id);
  if (!cell.ok()) return cell.status();
  if (restart.restart_count > 0 && on_restart != nullptr) {
    (*cell)->post_internal(new RestartNotice(on_restart, restart));
  }
  return detail::IntrusivePtr<detail::ActorHandle>(*std::move(cell));
}

detail::IntrusivePtr<detail::ActorHandle> ActorSystem::find(ActorId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return nullptr;
  return detail::IntrusivePtr<detail::ActorHandle>::share(it->second.get());
}

void ActorSystem::on_actor_terminated(ActorId id, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (!name.empty()) {
    auto named = names_.find(name);
    if (named != names_.end() && named->second.get() == it->second.get()) names_.erase(named);
  }
  live_.erase(it);
  auto thread = dedicated_.find(id);
  if (thread != dedicated_.end()) {
    retired_.push_back(std::move(thread->second));
    dedicated_.erase(thread);
  }
  if (live_.empty()) all_terminated_.notify_all();
}

void ActorSystem::reap_dedicated_threads() {
  std::vector<std::unique_ptr<DedicatedThread>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& t : retired_) {
      if (t->is_current()) {
        continue;  // an actor's last callbacks run here; join it later
      }
      done.push_back(std::move(t));
    }
    std::erase(retired_, nullptr);
  }
  // Joined outside the lock: a terminating actor takes it on its way out.
}

void ActorSystem::shutdown() {
  std::vector<detail::IntrusivePtr<detail::ActorCell>> cells;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pool_) return;
    shutting_down_ = true;
    // Requested under the lock that also refuses spawns, so nothing that
    // sees a refused spawn can see an actor run another message.
    for (auto& [id, cell] : live_) {
      cell->request_kill(/*restart=*/false, "the actor system is shutting down");
      cells.push_back(cell);
    }
  }
  for (auto& cell : cells)
    cell->wake_for_kill();
  cells.clear();
  {
    std::unique_lock<std::mutex> lock(mu_);
    while (!live_.empty()) {
      if (!all_terminated_.wait_for(lock, std::chrono::seconds(5), [&] { return live_.empty(); })) {
        spdlog::warn("shutdown: still waiting for {} actor(s) to finish their current message",
                     live_.size());
      }
    }
  }
  reap_dedicated_threads();
  std::unique_ptr<ThreadPool> pool;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool = std::move(pool_);
  }
  pool.reset();
}

size_t ActorSystem::num_actors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

}  // namespace troupe
