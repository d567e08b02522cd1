// A head whose store is etcd (`troupe head --store etcd://...`): where in
// etcd its keys live, and the cluster token every head of the cluster shares.
//
//   etcd://10.0.0.1:2379,10.0.0.2:2379/team-a/   endpoints, then a key prefix
//
// Under the prefix (default "troupe/"):
//   leader   the leading head's address, on its lease (EtcdLeadership)
//   token    the cluster token, so that a standby taking over has it
//   head/    the head's records (head_records.h) and ids (head_ids.h)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/detail/etcd_client.h"
#include "core/cluster/detail/etcd_leadership.h"

namespace troupe::cluster {

struct EtcdStoreUrl {
  std::vector<std::string> endpoints;  // "HOST:PORT"
  std::string prefix = "troupe/";      // ends with '/'
  std::string leader_key() const { return prefix + "leader"; }
  std::string token_key() const { return prefix + "token"; }
  std::string records_prefix() const { return prefix + "head/"; }
};

// InvalidArgument, with an example, for anything but the form above.
absl::StatusOr<EtcdStoreUrl> parse_etcd_store_url(const std::string& url);

// Whether `address` names the heads' etcd rather than heads ("etcd://...").
inline bool is_etcd_url(const std::string& address) {
  return address.starts_with("etcd://");
}

// The "HOST:PORT" of the head that leads, read from the leader key at `url`
// (what workers, drivers and the CLI given the etcd rather than every head
// use). Errors: InvalidArgument (a bad url), Unavailable (etcd does not
// answer, or no head leads now).
absl::StatusOr<std::string> etcd_leader_address(const std::string& url);

// The token kept in etcd; if none is yet, `token` (or a fresh one if empty)
// is kept and returned - whichever head comes first sets it. A head given a
// token that differs from the one kept gets InvalidArgument (its workers
// could not join the others). Errors: those of etcd.
absl::StatusOr<std::string> etcd_cluster_token(EtcdClient& etcd, const EtcdStoreUrl& url,
                                               const std::string& token);

// What the other nodes reach a head at, "HOST:PORT" (the leader key's value,
// for those given the etcd rather than every head): `host`, or this
// machine's name when it listens on every interface.
std::string advertised_head_address(const std::string& host, uint16_t port);

// Campaigns until `leadership` leads (its epoch) or `cancelled` (nullopt),
// printing once that head `me` stands by, and when it leads.
std::optional<int64_t> stand_by_until_leading(EtcdLeadership& leadership, const std::string& me,
                                              const std::function<bool()>& cancelled);

}  // namespace troupe::cluster
