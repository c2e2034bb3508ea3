/// @file
/// The process mesh (DESIGN rule 7): world rank -> coordinates (dp, pp, cp, tp), with
/// tp varying fastest, so the ranks of a tensor-parallel group are neighbours (one node,
/// fastest links), then cp, then pp, and dp slowest:
/// ```
///   rank = ((dp_i * pp + pp_i) * cp + cp_i) * tp + tp_i
/// ```
/// Each axis's group is the set of ranks that differ only along that axis; it comes
/// from Communicator::split with the other three coordinates as the colour.
#pragma once
#include <memory>
#include <string>

#include "common/comm.h"

namespace gpt {

struct MeshShape {
  int dp = 1, pp = 1, cp = 1, tp = 1;
  int world() const { return dp * pp * cp * tp; }
};

struct MeshCoord {
  int dp = 0, pp = 0, cp = 0, tp = 0;
};

MeshCoord mesh_coord(const MeshShape& shape, int rank);
int mesh_rank(const MeshShape& shape, const MeshCoord& c);
std::string mesh_json(const MeshShape& shape);  ///< {"dp":..,"tp":..,"pp":..,"cp":..}

class Mesh {
 public:
  /// Splits `world` into the four axis groups; world->size() must equal shape.world().
  Mesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoord& coord() const { return coord_; }
  Communicator& world() { return world_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  Communicator& cp() { return *cp_; }
  Communicator& tp() { return *tp_; }

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> dp_, pp_, cp_, tp_;
};

}  // namespace gpt
