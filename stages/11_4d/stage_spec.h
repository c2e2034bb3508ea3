// What stage 11 implements and reads, and its own limits on a configuration: the
// trainer's (stage_main checks them before a run) and build/bin/memory_plan's, which
// refuses what the trainer would refuse before it plans anything.
#pragma once
#include "common/config.h"
#include "common/driver.h"
#include "common/mesh.h"

namespace gpt {

// Stage 11's own limits on a configuration on `shape` (UserErrors naming the keys): tensor,
// context and pipeline parallelism's, and full recompute refused with a split backward.
void check_4d(const Config& cfg, const MeshShape& shape);
// What stage 11 implements and reads (common/driver.h), its checks check_4d.
StageSpec stage_11_spec();

}  // namespace gpt
