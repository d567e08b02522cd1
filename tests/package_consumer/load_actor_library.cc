// load_actor_library LIBRARY DIR: loads LIBRARY, allowing DIR, and prints the
// actor types it registered. Exits 1 if it fails or registers nothing.
#include <cstdio>
#include <string>
#include <vector>

#include "core/actor_type.h"
#include "core/cluster/actor_library.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBRARY DIR\n", argv[0]);
    return 2;
  }
  absl::StatusOr<std::vector<std::string>> types =
      troupe::cluster::load_actor_library(argv[1], {argv[2]});
  if (!types.ok()) {
    std::fprintf(stderr, "%s\n", types.status().ToString().c_str());
    return 1;
  }
  for (const std::string& type : *types) {
    if (troupe::find_actor_type(type) == nullptr) return 1;
    std::printf("registered %s\n", type.c_str());
  }
  return types->empty() ? 1 : 0;
}
