// Random rank-local layouts for the layout tests: a mesh of tp x pp ranks over a small
// GPT-2 (5 layers, 4 heads, Vp 256), with pipeline cuts drawn at random.
#pragma once
#include <algorithm>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/rank_layout.h"

namespace gpt::test {

inline ModelConfig layout_test_model() {
  ModelConfig m;
  // block_size 17: 72,320 parameters, a multiple of 2 and 4 but not of 3, so that on 3
  // ranks the flat shards differ in size and the first estimate of an element's owner,
  // g * ranks / total, can be one rank low (layout_exchange.cpp corrects it).
  m.n_layer = 5, m.n_embd = 32, m.n_head = 4, m.block_size = 17, m.vocab_size = 200;  // Vp = 256
  return m;
}

struct RandomMesh {
  int tp = 1, pp = 1;
  std::vector<int> cuts;  // pp + 1 layer boundaries, cuts[0] = 0, cuts[pp] = n_layer
  std::vector<RankLayout> layouts;  // rank = stage * tp + tp_rank
  std::string describe() const {
    // Appended piece by piece: GCC 12 warns (-Wrestrict) falsely on "literal" + to_string(...).
    std::string s = "tp ";
    s += std::to_string(tp);
    s += " x pp ";
    s += std::to_string(pp);
    s += ", layers cut at";
    for (int c : cuts) {
      s += ' ';
      s += std::to_string(c);
    }
    return s;
  }
};

// A random tp x pp = ranks mesh (tp among the divisors of n_head that divide ranks, pp
// at most n_layer), each stage at least one layer.
inline RandomMesh random_mesh(const ParamLayout& global, int ranks, std::mt19937& rng) {
  const ModelConfig& m = global.model();
  std::vector<int> tps;
  for (int tp = 1; tp <= ranks; ++tp)
    if (ranks % tp == 0 && m.n_head % tp == 0 && ranks / tp <= m.n_layer) tps.push_back(tp);
  if (tps.empty()) throw std::invalid_argument("random_mesh: no tp x pp mesh of " + std::to_string(ranks) + " ranks");
  RandomMesh mesh;
  mesh.tp = tps[std::uniform_int_distribution<size_t>(0, tps.size() - 1)(rng)];
  mesh.pp = ranks / mesh.tp;
  std::vector<int> inner;
  for (int l = 1; l < m.n_layer; ++l) inner.push_back(l);
  std::shuffle(inner.begin(), inner.end(), rng);
  mesh.cuts = {0, m.n_layer};
  mesh.cuts.insert(mesh.cuts.end(), inner.begin(), inner.begin() + (mesh.pp - 1));
  std::sort(mesh.cuts.begin(), mesh.cuts.end());
  for (int s = 0; s < mesh.pp; ++s)
    for (int t = 0; t < mesh.tp; ++t)
      mesh.layouts.push_back(RankLayout::pipeline_stage(RankLayout::tensor_parallel(global, mesh.tp, t), mesh.cuts[size_t(s)],
                                                        mesh.cuts[size_t(s) + 1], s == 0, s == mesh.pp - 1));
  return mesh;
}

}  // namespace gpt::test
