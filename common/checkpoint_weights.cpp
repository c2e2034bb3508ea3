// A checkpoint's weights into one whole model; see checkpoint_weights.h.
#include "common/checkpoint_weights.h"

#include <type_traits>
#include <vector>

#include "common/device_array.h"
#include "common/error.h"
#include "common/gpt2_layout.h"

namespace gpt {

template <class A>
CheckpointState load_checkpoint_weights(GPT2<A>& model, const std::string& checkpoint) {
  using G = GradOf<A>;
  const ParamLayout& layout = model.layout();
  std::vector<G> host(size_t(layout.total()));
  CheckpointBuffer weights{"param", nullptr, 0, layout.total()};
  if constexpr (std::is_same_v<G, double>) weights.data64 = host.data();  // fp64: the CPU only
  else weights.data = host.data();
  const CheckpointState state = load_checkpoint(checkpoint, layout, {weights});
  if (model.device() == Device::CPU) model.set_params(host.data());
  else if constexpr (std::is_same_v<G, float>) model.set_params(on_device(model.device(), host).data());
  else internal_error("load_checkpoint_weights: fp64 runs on the CPU only");
  return state;
}

template CheckpointState load_checkpoint_weights(GPT2<float>&, const std::string&);
template CheckpointState load_checkpoint_weights(GPT2<double>&, const std::string&);
template CheckpointState load_checkpoint_weights(GPT2<bf16>&, const std::string&);

}  // namespace gpt
