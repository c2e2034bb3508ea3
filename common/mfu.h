/// @file
/// Model FLOPs utilisation (MFU): the training FLOP/s a run achieves over the peak of the
/// hardware it runs on (PaLM, Chowdhery et al. 2022, appendix B).
///
/// ```
///   flops per token = 6 N + 12 L C T
///     6 N: every parameter does a multiply-add (2 flops) in the forward and two in the
///          backward (the input's and the weight's gradient);
///     12 L C T: the attention's scores Q K^T and weighted sum P V, 2 T C flops each per
///          token and layer in the forward, twice that in the backward (causal masking
///          not discounted, as in PaLM's count).
///   MFU = tokens/s x flops per token / peak FLOP/s of every GPU the job runs on
/// ```
/// Ranks that share one GPU share its peak: the denominator counts each GPU once.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "common/comm.h"
#include "common/config.h"
#include "common/device.h"
#include "common/precision.h"

namespace gpt {

/// Training FLOPs per token of a model of n_params parameters and shape m at sequence
/// length seq_len (the formula above).
double training_flops_per_token(int64_t n_params, const ModelConfig& m, int seq_len);

/// The model FLOPs utilisation of tokens_per_s at flops_per_token against peak_flops;
/// empty without a peak.
std::optional<double> model_flops_utilisation(double tokens_per_s, double flops_per_token,
                                              std::optional<double> peak_flops);

/// One rank's GPU (its UUID) and that GPU's peak FLOP/s (0: unknown).
struct RankPeak {
  std::array<unsigned char, 16> gpu{};  ///< device_uuid(); all zeros on the CPU
  double flops = 0;                     ///< device_peak_flops(), 0 when unknown
};

/// The sum of the peaks of the distinct GPUs among `ranks` (a GPU shared by several
/// ranks counted once); empty when any rank's peak is unknown (the CPU, an unlisted GPU).
std::optional<double> distinct_peak_sum(const std::vector<RankPeak>& ranks);

/// A RankPeak as the bytes world_peak_flops gathers: the UUID, then the peak's double.
std::vector<unsigned char> pack_rank_peak(const RankPeak& r);
/// The RankPeaks of every rank back from the concatenation of their packed bytes.
std::vector<RankPeak> unpack_rank_peaks(const std::vector<unsigned char>& bytes);

/// distinct_peak_sum over every rank of `world`, for matmuls in precision p: each rank
/// contributes its current GPU. Collective; the same result on every rank.
std::optional<double> world_peak_flops(Communicator& world, Device d, Precision p);

}  // namespace gpt
