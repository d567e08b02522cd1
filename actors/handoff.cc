#include "actors/handoff.h"

#include <map>
#include <mutex>
#include <utility>

namespace troupe::actors {
namespace {

struct Entry {
  std::type_index type;
  std::shared_ptr<void> object;
};

std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, Entry>& table() {
  static auto* t = new std::map<std::string, Entry>();  // never destroyed: used at exit
  return *t;
}

}  // namespace

void Handoff::put(const std::string& name, std::type_index type, std::shared_ptr<void> object) {
  std::lock_guard lock(table_mutex());
  table().insert_or_assign(name, Entry{type, std::move(object)});
}

std::shared_ptr<void> Handoff::get(const std::string& name, std::type_index type) {
  std::lock_guard lock(table_mutex());
  auto it = table().find(name);
  if (it == table().end() || it->second.type != type) return nullptr;
  return it->second.object;
}

void Handoff::retract(const std::string& name, const void* object) {
  std::lock_guard lock(table_mutex());
  auto it = table().find(name);
  if (it != table().end() && it->second.object.get() == object) table().erase(it);
}

}  // namespace troupe::actors
