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

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/cluster/detail/etcd_client.h"

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

// The token kept in etcd; if none is yet, `token` (or a fresh one if empty)
// is kept and returned - whichever head comes first sets it. A head given a
// token that differs from the one kept gets InvalidArgument (its workers
// could not join the others). Errors: those of etcd.
absl::StatusOr<std::string> etcd_cluster_token(EtcdClient& etcd, const EtcdStoreUrl& url,
                                               const std::string& token);

}  // namespace troupe::cluster
