// Stands in for the libtroupe_core of another troupe build (for
// actor_library_test): it defines the symbol by which load_actor_library
// tells copies of libtroupe_core apart.
extern "C" {
extern const char troupe_core_instance;
const char troupe_core_instance = 0;
}
