// A real etcd (Debian's etcd-server) on loopback for a test suite
// (LocalEtcd): started once per test process, killed after; every test
// starts on an empty key space with a client in client_. A test skips,
// saying so, where no etcd is installed.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "core/cluster/detail/etcd_client.h"
#include "core/cluster/local_cluster.h"
#include "core/cluster/local_etcd.h"

namespace troupe::cluster {

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto etcd = LocalEtcd::start();
    if (!etcd.ok()) {
      status_ = new absl::Status(etcd.status());
      return;
    }
    etcd_ = etcd->release();
    endpoint_ = new std::string(etcd_->endpoint());
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (status_ != nullptr && absl::IsNotFound(*status_)) {
      GTEST_SKIP() << "skipped: " << status_->message();
    }
    ASSERT_NE(etcd_, nullptr) << "etcd did not start: " << *status_;
    auto c = EtcdClient::connect({*endpoint_});
    ASSERT_TRUE(c.ok()) << c.status();
    client_.emplace(*std::move(c));
    // Each test on a clean key space.
    ASSERT_TRUE(client_->delete_prefix("").ok());
  }

  // "HOST:PORT" of the etcd.
  static std::string host_port() { return etcd_->host_port(); }

  static inline LocalEtcd* etcd_ = nullptr;
  static inline absl::Status* status_ = nullptr;
  static inline std::string* endpoint_ = nullptr;
  std::optional<EtcdClient> client_;
};

}  // namespace troupe::cluster
