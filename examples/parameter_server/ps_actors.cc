// The library workers load (--actor-lib libps_actors.so): the actors
// register themselves as it loads.
#include "ps_actors.h"
