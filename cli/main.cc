// troupe: the command-line entry point. Cluster commands (head, worker,
// status, stop) come from core; training commands (train, generate, export, data)
// from trainers.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cluster/commands.h"
#include "nn/process_env.h"
#include "spdlog/spdlog.h"
#include "trainers/data_command.h"
#include "trainers/train_command.h"

namespace {

void print_usage() {
  std::printf(
      "usage: troupe <command> [flags]\n\n"
      "Cluster commands:\n"
      "  head     start the head of a cluster           (ray start --head)\n"
      "  worker   join this machine to a cluster        (ray start --address)\n"
      "  status   show nodes, jobs, actors, groups      (ray status)\n"
      "  stop     stop the cluster                      (ray stop)\n"
      "  kill     kill an actor by name or id           (ray.kill)\n"
      "  pg       list or remove placement groups       (remove_placement_group)\n"
      "  drain    move elastic jobs off a worker         (kubectl drain)\n\n"
      "Training commands:\n"
      "  train    train a model from a DeepSpeed-style config (deepspeed train.py)\n"
      "  generate sample text from trained weights or a checkpoint\n"
      "  export   a checkpoint's weights as a Hugging Face model directory\n"
      "  data     prepare token datasets (byte-level), synthetic tasks\n\n"
      "Run `troupe <command> --help` for its flags.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage();
    return 2;
  }
  // TROUPE_LOG_LEVEL=trace|debug|info|warn|error|off (default info), inherited
  // by the workers `troupe train --local` starts.
  if (const char* level = std::getenv("TROUPE_LOG_LEVEL"); level != nullptr && *level != '\0') {
    // spdlog reads a name it does not know as "off": say so instead of going quiet.
    const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
    if (parsed == spdlog::level::off && std::string(level) != "off") {
      std::fprintf(stderr,
                   "troupe: TROUPE_LOG_LEVEL=%s is not a level (trace, debug, info, warn, error, "
                   "off); logging at info\n",
                   level);
    } else {
      spdlog::set_level(parsed);
    }
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "head") return troupe::cluster::head_command(args);
  if (command == "worker") {
    // A worker runs the math: BLAS and OpenMP settings must be in place
    // before those libraries load.
    troupe::nn::reexec_with_compute_environment(argv);
    return troupe::cluster::worker_command(args);
  }
  if (command == "train" || command == "generate") {
    // The driver evaluates and generates on its own CPU too.
    troupe::nn::reexec_with_compute_environment(argv);
    return command == "train" ? troupe::trainers::train_command(args)
                              : troupe::trainers::generate_command(args);
  }
  if (command == "data") return troupe::trainers::data_command(args);
  if (command == "export") return troupe::trainers::export_command(args);
  if (command == "status") return troupe::cluster::status_command(args);
  if (command == "stop") return troupe::cluster::stop_command(args);
  if (command == "kill") return troupe::cluster::kill_command(args);
  if (command == "pg") return troupe::cluster::pg_command(args);
  if (command == "drain") return troupe::cluster::drain_command(args);
  if (command == "--help" || command == "-h" || command == "help") {
    print_usage();
    return 0;
  }
  if (command == "--version" || command == "version") {
    std::printf("troupe %s\n", TROUPE_VERSION);
    return 0;
  }
  std::fprintf(stderr, "troupe: unknown command '%s'\n\n", command.c_str());
  print_usage();
  return 2;
}
