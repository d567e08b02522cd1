// Mistakes the actor API turns into compile errors, one per CASE (see
// check.cmake); CASE 0 is the same code used correctly, which must compile.
#include <string>

#include "core/actor.h"
#include "core/cluster/cluster.h"

namespace compile_fail {

class Worker {
 public:
  Worker() = default;
  Worker(float learning_rate, std::string name) : learning_rate_(learning_rate), name_(name) {}
  int step(int n) { return n; }
  int unlisted(int n) { return n; }  // same signature as step, but not in TROUPE_ACTOR
  std::string greet(std::string who) const { return name_ + who; }

 private:
  float learning_rate_ = 0;
  std::string name_;
};
TROUPE_ACTOR(Worker, &Worker::step, &Worker::greet);
TROUPE_ACTOR_CONSTRUCTOR(Worker, float, std::string);

void use(troupe::Cluster& cluster, const troupe::ActorRef<Worker>& worker) {
#if CASE == 0
  // As a C++ call would: 0.05 (a double) to float, literals to std::string.
  auto spawned = cluster.spawn<Worker>({}, 0.05, "w0");
  static_cast<void>(spawned);
  static_cast<void>(worker.call(&Worker::step, 1));
  static_cast<void>(worker.call(&Worker::greet, "hello"));
  worker.tell(&Worker::step, 2);
#elif CASE == 1
  static_cast<void>(worker.call(&Worker::unlisted, 1));  // not listed in TROUPE_ACTOR
#elif CASE == 2
  worker.tell(&Worker::unlisted, 1);  // not listed in TROUPE_ACTOR
#elif CASE == 3
  static_cast<void>(worker.call(&Worker::step, std::string("one")));  // not an int
#elif CASE == 4
  auto spawned = cluster.spawn<Worker>({}, std::string("0.05"), "w0");  // not a float
  static_cast<void>(spawned);
#elif CASE == 5
  auto spawned = cluster.spawn<Worker>({}, 0.05f);  // no (float) constructor
  static_cast<void>(spawned);
#endif
}

}  // namespace compile_fail
