// A node: this process's place in a cluster. It runs the process's actors
// (an ActorSystem whose ids carry the node's index), listens for calls from
// other nodes on every data-plane transport it has (ucx, tcp), and sends
// calls to actors on other nodes peer to peer, over the best transport both
// sides have (transport/endpoints.h).
//
//   auto node = Node::start({.index = 3, .token = token});
//   node->set_node_endpoints(5, endpoints_of_node_5);       // from the head
//   ActorRef<Counter> c = node->ref<Counter>(id, 5);        // an actor on node 5
//   int n = *c.call(&Counter::add, 1).get();
//
// A call to an actor on a node that is lost - its connection breaks, or the
// head declares it dead - fails with ActorDied naming the node and the reason.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/actor.h"

namespace troupe::cluster {

class NodeCore;

struct NodeOptions {
  // This node's index (the high bits of the ids of actors spawned here);
  // the head assigns them, and is 0 itself.
  uint32_t index = 0;
  std::string token;               // the cluster token
  std::string name = "troupe";     // shown to peers in their logs
  std::string host = "127.0.0.1";  // the address data-plane listeners bind and advertise
  // Data-plane transports to listen on and call with, best first; those
  // that cannot start here are skipped (with a log line).
  std::vector<std::string> transports = {"ucx", "tcp"};
  uint16_t tcp_port = 0;  // the tcp listener's port (the head's control port); 0: any
  int threads = 0;        // actor threads; 0: one per core
  bool spin = true;       // idle actor threads spin before they sleep (ActorSystemOptions)
  absl::Duration connect_timeout = absl::Seconds(10);
};

// What the node asks the layer above (the cluster client) for.
struct NodeHooks {
  // Where actor `id` lives now, when its last known node is gone (it may have
  // been restarted elsewhere). Asked only for cluster actors
  // (is_cluster_actor), the ones that can move. Errors: ActorDied if it is
  // gone for good.
  std::function<absl::StatusOr<uint32_t>(ActorId id)> locate;
  // How often a lost call of an idempotent method of actor `id` may be sent
  // again (its max_task_retries; -1: unlimited).
  std::function<absl::StatusOr<int>(ActorId id)> task_retries;
  // Kills actor `id` (ray.kill) wherever it lives.
  std::function<void(ActorId id, bool restart, std::string reason)> kill;
  // Calls `cb` once when actor `id` terminates for good.
  std::function<void(ActorId id, DeathCallback cb)> monitor;
  // A connection to node `node` broke (reported to the head, which may
  // declare the node dead at once).
  std::function<void(uint32_t node, absl::Status why)> peer_lost;
  // The endpoints of a node this one has not heard of yet.
  std::function<absl::StatusOr<std::vector<std::string>>(uint32_t node)> node_endpoints;
};

class Node {
 public:
  static absl::StatusOr<std::unique_ptr<Node>> start(NodeOptions options);
  // Fails calls in flight, closes connections and listeners, and shuts the
  // actor system down.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  uint32_t index() const;
  // Sets the index once the head assigned it (a node starts unassigned to
  // learn its endpoints first). Before any actor is spawned here.
  void set_index(uint32_t index);
  ActorSystem& system() { return *system_; }
  // The data-plane endpoints this node listens on, best first.
  const std::vector<std::string>& endpoints() const;

  // Where node `node` listens; calls to its actors connect there.
  void set_node_endpoints(uint32_t node, std::vector<std::string> endpoints);
  // Node `node` moved to `endpoints` (the head failed over to a standby):
  // the connection to where it was is closed (calls in flight on it fail
  // with Unavailable) and the next call connects there.
  void redirect(uint32_t node, std::vector<std::string> endpoints);
  // Opens the connection to node `node` now, if there is none, as its first
  // call would; blocks while connecting. Once open, the node's loss breaks it
  // and the peer_lost hook hears of it at once. Errors: those of connecting.
  absl::Status connect(uint32_t node);
  // Node `node` is gone: calls in flight to it, and later calls to actors
  // last seen there that have not moved, fail with ActorDied(reason).
  void fail_node(uint32_t node, const absl::Status& reason);
  // Actor `id` now lives on `node` (restarted there).
  void relocate(ActorId id, uint32_t node);
  void set_hooks(NodeHooks hooks);

  // A handle to actor `id` of type T on node `node` (this node: the local actor).
  template <RegisteredActor T>
  ActorRef<T> ref(ActorId id, uint32_t node) {
    return ActorRef<T>::from_handle(handle(id, actor_type_of<T>(), node));
  }
  detail::IntrusivePtr<detail::ActorHandle> handle(ActorId id, const ActorTypeInfo& type,
                                                   uint32_t node);
  // What the Writers and Readers of this node's calls turn ActorRefs with.
  detail::ActorResolver& actor_resolver();

  // Calls answered and sent, for tests and /metrics.
  uint64_t calls_served() const;

 private:
  Node() = default;

  std::unique_ptr<ActorSystem> system_;
  std::shared_ptr<NodeCore> core_;
};

}  // namespace troupe::cluster
