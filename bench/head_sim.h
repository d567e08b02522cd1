// Simulated nodes for head_bench: many node agents in one process, each with
// its own connection to a real head, its own listener for the head's calls
// and its own heartbeat timer, speaking the real protocol - HeadService and
// NodeAgent calls, Codec-encoded in Envelope frames - over the tcp transport.
// What a worker process does with its Member and NodeAgent, less the actors:
// an actor the head asks an agent to host is acknowledged, not run.
//
//   SimFleet fleet({.head = "tcp://127.0.0.1:6380", .token = token});
//   fleet.add_workers(2000, absl::Seconds(1), absl::Seconds(30));
//   fleet.crash(17);                       // as if its process died
//   absl::Time heard = fleet.death_heard(17).value();
//
// Threads: the transport's I/O thread reads every reply and call; one timer
// thread sends the heartbeats, each agent on its own phase, and measures how
// late it sends them (lag()): a run whose timer fell behind measured the
// simulator, not the head.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/protocol.h"
#include "core/codec.h"
#include "core/detail/remote_codec.h"
#include "core/future.h"
#include "transport/connection.h"

namespace troupe::bench {

struct SimOptions {
  std::string head;   // "tcp://HOST:PORT"
  std::string token;  // the cluster token
  // What each worker agent offers ("sim" keeps the bench's actors off real workers).
  std::string resources = "CPU=64,sim=64";
  // Delay each heartbeat by up to this, uniformly at random (slowness).
  absl::Duration jitter = absl::ZeroDuration();
};

// Latencies of one kind of call, in milliseconds.
struct Latencies {
  std::vector<double> ms;
  double quantile(double q) const;
};

// A call's result as its reply encodes it (its Status, then its value).
template <class T>
Result<T> decode(std::span<const std::byte> bytes) {
  Reader in(bytes);
  return detail::decode_result<T>(in);
}

class SimFleet {
 public:
  // Starts the transport and the heartbeat timer. Errors: the transport's.
  static absl::StatusOr<std::unique_ptr<SimFleet>> start(SimOptions options);
  ~SimFleet();

  // Adds `n` worker agents, their starts spread evenly over `spread`: each
  // connects, registers and says it is ready, as `troupe worker` does.
  // Returns once every one is ready; errors when one fails, or after `timeout`.
  absl::Status add_workers(int n, absl::Duration spread, absl::Duration timeout);
  // Adds a driver agent (a job's) and returns its slot. It heartbeats like the rest.
  absl::StatusOr<int> add_driver(absl::Duration timeout);
  // The driver in slot `driver` leaves in order (its job ends).
  absl::Status leave(int driver, absl::Duration timeout);

  // Calls HeadService method `method` ("spawn_actor") from agent `slot` with
  // Codec-encoded `args`; `done` runs on the I/O thread with the reply's
  // encoded result (its Status first: decode<T>) or the error that failed
  // the call.
  using Done = std::function<void(absl::StatusOr<std::span<const std::byte>>)>;
  void call_head(int slot, const std::string& method, Writer& args, Done done);
  // The same, waiting for the reply: its encoded result.
  absl::StatusOr<std::vector<std::byte>> call_head_sync(int slot, const std::string& method,
                                                        Writer& args, absl::Duration timeout);

  // Faults. crash: the agent's process died (its connections reset, its
  // listener gone). hang: it stops - no heartbeats, no answers - with its
  // connections open. heal: a hung agent goes on (after a partition).
  void crash(int slot);
  void hang(int slot);
  void heal(int slot);
  void set_jitter(absl::Duration jitter);

  int size() const;
  uint32_t node_of(int slot) const;  // its node index
  // When some agent first heard (in a heartbeat reply) that agent `slot`
  // is dead; nullopt if none has.
  std::optional<absl::Time> death_heard(int slot) const;
  // Agents heard of as dead, and those the head told (heartbeat reply known
  // = false) that it no longer knows them.
  std::vector<int> heard_dead() const;
  bool told_unknown(int slot) const;
  // Actors the head asked agents to host, and to kill.
  uint64_t hosted() const { return hosted_.load(); }
  uint64_t killed() const { return killed_.load(); }

  // Heartbeats sent and answered, how late the timer sent them (ms after
  // due), and their round trips; reset_counters() starts a new window.
  uint64_t heartbeats_sent() const { return heartbeats_sent_.load(); }
  uint64_t heartbeats_answered() const { return heartbeats_answered_.load(); }
  Latencies lag() const;
  Latencies heartbeat_rtt() const;
  Latencies register_rtt() const;
  void reset_counters();

 private:
  struct Agent;
  struct Call {
    Done done;
  };

  explicit SimFleet(SimOptions options);
  absl::Status connect(Agent& agent);
  void send_call(Agent& agent, uint64_t method, Writer& args, Done done);
  void on_reply(Agent& agent, transport::Frame& frame);
  void on_head_call(int slot, const std::weak_ptr<transport::Connection>& conn,
                    transport::Frame& frame);
  void register_agent(int slot, std::function<void(absl::Status)> ready);
  void heartbeat(int slot, absl::Time due);
  void on_heartbeat(int slot, absl::Time sent, cluster::HeartbeatReply reply);
  void timer_loop();
  uint64_t method_id(const std::string& type, const std::string& method) const;

  const SimOptions options_;
  std::unique_ptr<transport::Transport> transport_;
  std::atomic<uint64_t> next_call_{1};
  std::atomic<uint64_t> hosted_{0};
  std::atomic<uint64_t> killed_{0};
  std::atomic<uint64_t> heartbeats_sent_{0};
  std::atomic<uint64_t> heartbeats_answered_{0};

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<int> slot_of_node_;       // node index -> slot, -1 if none
  std::multimap<absl::Time, int> due_;  // the timer's schedule
  int64_t jitter_us_ = 0;
  Latencies lag_, heartbeat_rtt_, register_rtt_;
  bool stopping_ = false;
  std::thread timer_;
};

}  // namespace troupe::bench
