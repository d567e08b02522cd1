// Cluster authentication: every connection, control or data, opens with a
// mutual HMAC-SHA256 challenge-response over the cluster token.
//
//   client -> Hello{nonce_c}        server -> Hello{nonce_s}
//   client -> Proof{HMAC(token, "troupe-auth-v1 client" | nonce_s | nonce_c)}
//   server -> Verdict{accepted} and, if accepted, Proof{HMAC(token, "... server" | nonce_c |
//   nonce_s)}
//
// The token never crosses the wire. A peer that sends anything else, or the
// wrong proof, is disconnected before any of its messages is processed.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace troupe::transport {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// A cluster token: 32 random bytes, hex-encoded (64 characters).
std::string generate_token();

// The largest token file read (a token is 64 characters).
constexpr size_t kMaxTokenFileBytes = 4096;

// Reads a token file (surrounding whitespace ignored). Errors: NotFound,
// PermissionDenied, InvalidArgument for an empty file, a directory, or one
// larger than kMaxTokenFileBytes.
absl::StatusOr<std::string> read_token_file(const std::string& path);

// Writes `token` to `path` with mode 0600 (created or truncated).
absl::Status write_token_file(const std::string& path, std::string_view token);

// The token from `token_file` if given, else from $TROUPE_TOKEN. Error
// FailedPrecondition saying how to provide one if neither is set.
absl::StatusOr<std::string> resolve_token(const std::string& token_file);

Nonce random_nonce();

enum class Role { kClient, kServer };

// HMAC-SHA256(token, label(role) | their_nonce | my_nonce): what `role` sends
// to prove it holds the token.
Mac compute_proof(std::string_view token, Role role, const Nonce& their_nonce,
                  const Nonce& my_nonce);

// Constant-time comparison.
bool proofs_equal(const Mac& a, const Mac& b);

}  // namespace troupe::transport
