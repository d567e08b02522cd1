// The library workers load (--actor-lib libgroup_actors.so).
#include "group_actors.h"
