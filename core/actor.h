// The actor API in one include: ActorSystem, ActorRef, TROUPE_ACTOR and
// TROUPE_ACTOR_CONSTRUCTOR, Future/Promise, when_all, Status helpers.
// See docs/actors.md.
#pragma once

#include "core/actor_ref.h"      // IWYU pragma: export
#include "core/actor_system.h"   // IWYU pragma: export
#include "core/actor_type.h"     // IWYU pragma: export
#include "core/future.h"         // IWYU pragma: export
#include "core/spawn_options.h"  // IWYU pragma: export
#include "core/status.h"         // IWYU pragma: export
#include "core/when_all.h"       // IWYU pragma: export

// What TROUPE_ACTOR expands to needs all of the above.
#include "core/detail/register_actor.h"  // IWYU pragma: export
