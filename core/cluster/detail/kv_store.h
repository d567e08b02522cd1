// The head's KV store as a collectives rendezvous Store: how the members of a
// collective group among actors find each other (and exchange NCCL ids).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/actor_ref.h"
#include "core/cluster/detail/head.h"
#include "transport/collectives/store.h"

namespace troupe::cluster {

class HeadKvStore final : public transport::Store {
 public:
  // `call_timeout` bounds each call to the head.
  explicit HeadKvStore(ActorRef<HeadService> head, absl::Duration call_timeout = absl::Seconds(10))
      : head_(std::move(head)), call_timeout_(call_timeout) {}

  absl::Status set(const std::string& key, std::string value) override;
  // Polls the head (1 ms, doubling to 50 ms) until the key is there or
  // `timeout` passes: DeadlineExceeded naming the key. Errors reaching the
  // head are returned as they are.
  absl::StatusOr<std::string> wait_get(const std::string& key, absl::Duration timeout) override;

 private:
  ActorRef<HeadService> head_;
  absl::Duration call_timeout_;
};

}  // namespace troupe::cluster
