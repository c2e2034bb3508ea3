/// @file
/// The whole model's weights on one rank or on all of them, as the sample and the
/// multiple-choice eval need them: each stage says how it assembles them (its own
/// parallelism decides: the weights it holds whole already, a gather of its shards or of
/// its tensor and pipeline pieces), and the driver (common/driver.h) calls it when a
/// sample or an eval is due.
#pragma once
#include <functional>
#include <utility>

#include "common/device_array.h"

namespace gpt {

/// Where a gather of the whole model delivers it: to the lead rank (the sample) or to
/// every rank (the multiple-choice eval, which every rank scores a share of).
enum class WholeOn { Lead, EveryRank };

/// The whole model's compute weights (stored as A, in the run's device memory) on a rank
/// that receives them: weights the rank holds whole already, or a copy gathered for it.
template <class A>
struct WholeWeights {
  const A* view = nullptr;  ///< weights this rank holds whole already (data parallelism, ZeRO-1 and -2)
  DeviceArray<A> gathered;  ///< else a gathered copy; both empty on a rank that receives nothing
  const A* data() const { return view ? view : gathered.empty() ? nullptr : gathered.data(); }  ///< the weights
  /// Weights the rank holds whole already, read in place.
  static WholeWeights held(const A* weights) {
    WholeWeights w;
    w.view = weights;
    return w;
  }
  /// A gathered copy (empty on a rank that receives nothing).
  static WholeWeights copy(DeviceArray<A> weights) {
    WholeWeights w;
    w.gathered = std::move(weights);
    return w;
  }
};

/// How a stage assembles its whole model, called on every rank (it may communicate): the
/// lead rank, and with WholeOn::EveryRank every rank, receives the weights.
template <class A>
using GatherWhole = std::function<WholeWeights<A>(WholeOn on)>;

}  // namespace gpt
