// Device memory on the GPU (common/device_array.h): an allocation the GPU cannot hold is
// refused with a message that says what was asked for, what is free, what this process
// holds by kind and what to change, not CUDA's bare "out of memory"; and the GPU is
// usable after it.
#include "tests/gpu/gpu_test.h"

#include <string>

#include "common/device_array.h"
#include "common/error.h"
#include "common/memory.h"

using namespace gpt;

TEST_CASE("device memory: an allocation larger than the GPU is refused with the numbers and a remedy", "[gpu]") {
  const MemScope activations(MemKind::Activations);
  const DeviceArray<float> held(Device::CUDA, size_t(1) << 20);  // 4 MiB the message must count
  const size_t too_much = size_t(1) << 38;                          // 1 TiB of floats: no GPU has it
  try {
    DeviceArray<float> huge(Device::CUDA, too_much);
    FAIL("an allocation of 1 TiB succeeded");
  } catch (const UserError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("out of GPU memory: allocating 1.00 TiB more for activations") != std::string::npos);
    CHECK(message.find(" is free") != std::string::npos);
    CHECK(message.find("activations 4.00 MiB") != std::string::npos);
    CHECK(message.find("micro_batch_size") != std::string::npos);
  }
  // Control: the GPU still allocates after the refusal.
  const DeviceArray<float> after(Device::CUDA, size_t(1) << 20);
  CHECK(after.size() == size_t(1) << 20);
}
