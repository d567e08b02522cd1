// A client of etcd v3 through its HTTP/JSON gateway (etcd 3.4: POST
// /v3/kv/range, /v3/kv/put, /v3/kv/deleterange, /v3/kv/txn, /v3/lease/...):
// what a head keeping its durable decisions in etcd needs - reads, writes,
// compare-and-set transactions and leases. Keys and values are bytes
// (base64 on the wire).
//
//   auto etcd = EtcdClient::connect({"http://10.0.0.1:2379", "http://10.0.0.2:2379"});
//   absl::StatusOr<int64_t> lease = etcd->grant_lease(absl::Seconds(3));
//   EtcdTxn take;                                   // become leader if nobody is
//   take.compares.push_back(EtcdCompare::absent("troupe/leader"));
//   take.success.push_back(EtcdOp::put("troupe/leader", "head-2", *lease));
//   absl::StatusOr<EtcdTxnResult> r = etcd->txn(take);  // r->succeeded
//
// Each request is one HTTP/1.1 exchange on a connection of its own, to the
// first endpoint that answers (the head's writes are few: decisions, not
// heartbeats). Blocking; thread-safe (no state but the endpoints).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace troupe::cluster {

struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // writes since it was created
  int64_t lease = 0;    // 0: none
};

// A condition of a transaction on one key.
struct EtcdCompare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Result { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the revisions and the version
  std::string value;   // for kValue

  // The key does not exist (it was never created, or was deleted).
  static EtcdCompare absent(std::string key);
  // The key was last written at `revision`.
  static EtcdCompare mod_revision_is(std::string key, int64_t revision);
  static EtcdCompare value_is(std::string key, std::string value);
};

// An operation of a transaction.
struct EtcdOp {
  enum class Kind { kPut, kDeleteRange, kRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // put
  std::string range_end;  // delete/range: up to (not including) this key; empty: the key alone
  int64_t lease = 0;      // put

  static EtcdOp put(std::string key, std::string value, int64_t lease = 0);
  static EtcdOp get(std::string key);
  static EtcdOp delete_key(std::string key);
  static EtcdOp delete_prefix(std::string prefix);
};

struct EtcdTxn {
  std::vector<EtcdCompare> compares;  // all must hold...
  std::vector<EtcdOp> success;        // ...for these to run, else
  std::vector<EtcdOp> failure;        // these
};

struct EtcdTxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's after the transaction
  // The keys each kRange op of the branch that ran found, in order.
  std::vector<std::vector<EtcdKv>> ranges;
};

// The first key after every key starting with `prefix` (etcd's range_end for
// a prefix); "\0" for an empty prefix (every key).
std::string etcd_prefix_end(const std::string& prefix);

class EtcdClient {
 public:
  // `endpoints`: "http://HOST:PORT" or "HOST:PORT", tried in order for each
  // request. `timeout`: each request's, per endpoint. InvalidArgument for
  // none, or one that does not parse (https is not supported).
  static absl::StatusOr<EtcdClient> connect(std::vector<std::string> endpoints,
                                            absl::Duration timeout = absl::Seconds(5));

  // Errors of every call: Unavailable when no endpoint answers; the status
  // etcd gives otherwise (NotFound for a lease that expired, ...).
  absl::StatusOr<int64_t> put(const std::string& key, const std::string& value,
                              int64_t lease = 0);  // the store's revision after it
  absl::StatusOr<std::optional<EtcdKv>> get(const std::string& key);
  // Every key starting with `prefix`, in key order.
  absl::StatusOr<std::vector<EtcdKv>> get_prefix(const std::string& prefix);
  absl::StatusOr<int64_t> delete_prefix(const std::string& prefix);  // keys deleted
  absl::StatusOr<EtcdTxnResult> txn(const EtcdTxn& txn);

  // A lease of `ttl` (etcd may grant a longer one): its id.
  absl::StatusOr<int64_t> grant_lease(absl::Duration ttl);
  // Renews lease `id` for its TTL. NotFound once it has expired.
  absl::Status keep_alive(int64_t id);
  // Ends lease `id` now, deleting the keys attached to it.
  absl::Status revoke_lease(int64_t id);

  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  struct Endpoint {
    std::string host;
    uint16_t port = 0;
  };
  EtcdClient(std::vector<std::string> endpoints, std::vector<Endpoint> parsed,
             absl::Duration timeout)
      : endpoints_(std::move(endpoints)), parsed_(std::move(parsed)), timeout_(timeout) {}

  // POSTs `body` to `path` on the first endpoint that answers; etcd's JSON
  // answer (the first message of a streaming one).
  absl::StatusOr<std::string> post(const std::string& path, const std::string& body) const;

  std::vector<std::string> endpoints_;
  std::vector<Endpoint> parsed_;
  absl::Duration timeout_;
};

}  // namespace troupe::cluster
