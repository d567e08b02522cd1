// An actor library built against another troupe (for actor_library_test): it
// links foreign_troupe_core instead of this build's libtroupe_core.
extern "C" {
extern const char troupe_core_instance;
char foreign_actors_core_instance() {
  return troupe_core_instance;
}
}
