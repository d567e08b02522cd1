// Hand-off between the actors of one mesh coordinate. A stage, its parameter
// shard and its data loader live in one worker process (docs/design.md, "Training"), so they
// share memory instead of sending it: each publishes what the others need
// under its actor name, and the others find it by that name.
//
//   Handoff::publish<StageTensors>(name, tensors);           // in the stage
//   std::shared_ptr<StageTensors> t = Handoff::find<StageTensors>(name);  // in the shard
//
// Entries are process-local and typed: find<T> of an entry published as
// another type returns null. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <typeindex>

namespace troupe::actors {

class Handoff {
 public:
  // Publishes `object` under `name`, replacing what was there.
  template <class T>
  static void publish(const std::string& name, std::shared_ptr<T> object) {
    put(name, std::type_index(typeid(T)), std::move(object));
  }
  // The object published under `name` as a T, or null.
  template <class T>
  static std::shared_ptr<T> find(const std::string& name) {
    return std::static_pointer_cast<T>(get(name, std::type_index(typeid(T))));
  }
  // Removes the entry under `name` if it is still `object`.
  static void retract(const std::string& name, const void* object);

 private:
  static void put(const std::string& name, std::type_index type, std::shared_ptr<void> object);
  static std::shared_ptr<void> get(const std::string& name, std::type_index type);
};

}  // namespace troupe::actors
