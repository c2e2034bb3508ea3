// What tensor parallelism asks of the config, checked before anything is built (stage 06,
// and every later stage, which all take a tp key).
#pragma once
#include "common/config.h"

namespace gpt {

// UserErrors naming the key: tp greater than n_head, n_head not divisible by tp,
// seq_len not divisible by tp under sequence parallelism.
void check_tensor_parallel(const Config& cfg);

}  // namespace gpt
