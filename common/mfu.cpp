// Model FLOPs utilisation; see mfu.h.
#include "common/mfu.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace gpt {

double training_flops_per_token(int64_t n_params, const ModelConfig& m, int seq_len) {
  return 6.0 * double(n_params) + 12.0 * m.n_layer * m.n_embd * double(seq_len);
}

std::optional<double> model_flops_utilisation(double tokens_per_s, double flops_per_token,
                                              std::optional<double> peak_flops) {
  if (!peak_flops || !(*peak_flops > 0)) return std::nullopt;
  return tokens_per_s * flops_per_token / *peak_flops;
}

std::optional<double> distinct_peak_sum(const std::vector<RankPeak>& ranks) {
  if (ranks.empty()) return std::nullopt;
  std::vector<std::array<unsigned char, 16>> seen;
  double sum = 0;
  for (const RankPeak& r : ranks) {
    if (!(r.flops > 0)) return std::nullopt;
    if (std::find(seen.begin(), seen.end(), r.gpu) != seen.end()) continue;
    seen.push_back(r.gpu);
    sum += r.flops;
  }
  return sum;
}

namespace {
constexpr size_t kPackedBytes = sizeof(RankPeak::gpu) + sizeof(double);
}

std::vector<unsigned char> pack_rank_peak(const RankPeak& r) {
  std::vector<unsigned char> bytes(kPackedBytes);
  std::memcpy(bytes.data(), r.gpu.data(), sizeof(r.gpu));
  std::memcpy(bytes.data() + sizeof(r.gpu), &r.flops, sizeof(double));
  return bytes;
}

std::vector<RankPeak> unpack_rank_peaks(const std::vector<unsigned char>& bytes) {
  invariant(bytes.size() % kPackedBytes == 0, "unpack_rank_peaks: not a whole number of ranks");
  std::vector<RankPeak> ranks(bytes.size() / kPackedBytes);
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::memcpy(ranks[r].gpu.data(), &bytes[r * kPackedBytes], sizeof(ranks[r].gpu));
    std::memcpy(&ranks[r].flops, &bytes[r * kPackedBytes + sizeof(ranks[r].gpu)], sizeof(double));
  }
  return ranks;
}

std::optional<double> world_peak_flops(Communicator& world, Device d, Precision p) {
  // Every rank sends its (uuid, peak), even on the CPU, so that all take part.
  const std::vector<unsigned char> mine = pack_rank_peak({device_uuid(d), device_peak_flops(d, p).value_or(0.0)});
  std::vector<unsigned char> all(mine.size() * size_t(world.size()));
  world.all_gather(mine.data(), all.data(), mine.size(), DType::Byte);
  return distinct_peak_sum(unpack_rank_peaks(all));
}

}  // namespace gpt
