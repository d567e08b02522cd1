// The TCP sockets a process listens on, as /proc shows them: for the tests
// of what a node exposes (its interfaces) and what a flood of peers does.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace troupe::cluster::testing {

struct ListeningSocket {
  // The local address as /proc/net shows it: "0100007F" is 127.0.0.1 (IPv4,
  // hex, host order per word), IPv6 ones are 32 hex digits.
  std::string address;
  uint16_t port = 0;
};

// Every TCP socket process `pid` listens on, IPv4 and IPv6.
inline std::vector<ListeningSocket> listening_sockets(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.starts_with("socket:[")) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<ListeningSocket> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the column names
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || !inodes.contains(inode)) continue;
      const size_t colon = local.find(':');
      out.push_back({local.substr(0, colon),
                     static_cast<uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16))});
    }
  }
  return out;
}

}  // namespace troupe::cluster::testing
