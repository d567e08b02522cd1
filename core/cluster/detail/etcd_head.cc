#include "core/cluster/detail/etcd_head.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "transport/address.h"
#include "transport/auth.h"

namespace troupe::cluster {

absl::StatusOr<EtcdStoreUrl> parse_etcd_store_url(const std::string& url) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(url, ": ", why,
                     " (expected etcd://HOST:PORT[,HOST:PORT...][/PREFIX/], e.g. "
                     "etcd://10.0.0.1:2379,10.0.0.2:2379)"));
  };
  const std::string scheme = "etcd://";
  if (!url.starts_with(scheme)) return bad("not an etcd:// address");
  std::string rest = url.substr(scheme.size());
  EtcdStoreUrl out;
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    out.prefix = rest.substr(slash + 1);
    rest.resize(slash);
    if (out.prefix.empty()) return bad("an empty key prefix");
    if (!out.prefix.ends_with('/')) out.prefix += '/';
  }
  for (absl::string_view e : absl::StrSplit(rest, ',', absl::SkipWhitespace())) {
    std::string endpoint(e);
    if (!transport::parse_address("tcp://" + endpoint, "tcp").ok()) {
      return bad(absl::StrCat("'", endpoint, "' is not HOST:PORT"));
    }
    out.endpoints.push_back(std::move(endpoint));
  }
  if (out.endpoints.empty()) return bad("no endpoint");
  return out;
}

absl::StatusOr<std::string> etcd_leader_address(const std::string& url) {
  absl::StatusOr<EtcdStoreUrl> parsed = parse_etcd_store_url(url);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<EtcdClient> etcd = EtcdClient::connect(parsed->endpoints, absl::Seconds(2));
  if (!etcd.ok()) return etcd.status();
  absl::StatusOr<std::optional<EtcdKv>> leader = etcd->get(parsed->leader_key());
  if (!leader.ok()) return leader.status();
  if (!leader->has_value()) {
    return absl::UnavailableError(
        absl::StrCat("no head leads now (", url, " has no ", parsed->leader_key(), ")"));
  }
  return (*leader)->value;
}

absl::StatusOr<std::string> etcd_cluster_token(EtcdClient& etcd, const EtcdStoreUrl& url,
                                               const std::string& token) {
  EtcdTxn keep;
  keep.compares.push_back(EtcdCompare::absent(url.token_key()));
  keep.success.push_back(
      EtcdOp::put(url.token_key(), token.empty() ? transport::generate_token() : token));
  keep.success.push_back(EtcdOp::get(url.token_key()));
  keep.failure.push_back(EtcdOp::get(url.token_key()));
  absl::StatusOr<EtcdTxnResult> r = etcd.txn(keep);
  if (!r.ok()) return r.status();
  if (r->ranges.empty() || r->ranges[0].empty()) {
    return absl::InternalError(absl::StrCat("etcd lost ", url.token_key(), " as it was set"));
  }
  std::string kept = r->ranges[0][0].value;
  if (!token.empty() && kept != token) {
    return absl::InvalidArgumentError(
        absl::StrCat("the token given differs from the one the cluster's heads keep in etcd (",
                     url.token_key(), "): give every head the same token, or none"));
  }
  return kept;
}

std::string advertised_head_address(const std::string& host, uint16_t port) {
  std::string advertised = host;
  if (advertised == "0.0.0.0" || advertised == "::") {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') advertised = name;
  }
  return absl::StrCat(advertised, ":", port);
}

std::optional<int64_t> stand_by_until_leading(EtcdLeadership& leadership, const std::string& me,
                                              const std::function<bool()>& cancelled) {
  absl::StatusOr<int64_t> epoch = absl::DeadlineExceededError("not yet");
  for (bool told = false; !epoch.ok() && !cancelled();) {
    epoch = leadership.campaign(absl::Milliseconds(500));
    if (!epoch.ok() && !told) {
      std::printf("troupe head %s: standing by (%s)\n", me.c_str(),
                  std::string(epoch.status().message()).c_str());
      std::fflush(stdout);
      told = true;
    }
  }
  if (!epoch.ok()) return std::nullopt;
  std::printf("troupe head %s: leading (epoch %lld)\n", me.c_str(), static_cast<long long>(*epoch));
  std::fflush(stdout);
  return *epoch;
}

}  // namespace troupe::cluster
