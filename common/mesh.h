/// @file
/// The process mesh (docs/architecture.md, rule 6): world rank -> coordinates
/// (dp, pp, cp, tp), with tp varying fastest, so the ranks of a tensor-parallel group
/// are neighbours (one node, fastest links), then cp, then pp, and dp slowest:
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

/// Ranks along each axis of the mesh; each must be at least 1.
struct MeshShape {
  /// Data-parallel degree: model replicas, each fed its own batches (1: the axis is unused).
  int dp = 1, pp = 1, cp = 1, tp = 1;  ///< tensor-parallel degree: ranks sharing each layer's tensors
  /// @var pp
  /// Pipeline-parallel degree: stages the layers are divided into.

  /// @var cp
  /// Context-parallel degree: chunks each sequence is divided into.
  int world() const { return dp * pp * cp * tp; }  ///< total ranks the mesh needs
};

/// A rank's position in the mesh: each coordinate in [0, the shape's size on that axis).
struct MeshCoord {
  /// Index along the data-parallel axis: which replica.
  int dp = 0, pp = 0, cp = 0, tp = 0;  ///< index along the tensor-parallel axis: which slice of the tensors
  /// @var pp
  /// Index along the pipeline-parallel axis: which stage of layers.

  /// @var cp
  /// Index along the context-parallel axis: which chunks of each sequence.
};

/// The coordinates of world rank `rank` (the formula at the top of this file). Throws a
/// UserError when an axis is below 1 or rank is outside [0, shape.world()).
MeshCoord mesh_coord(const MeshShape& shape, int rank);
/// The world rank at coordinates c, the inverse of mesh_coord. Throws a UserError when an
/// axis is below 1 or a coordinate is outside the shape.
int mesh_rank(const MeshShape& shape, const MeshCoord& c);
std::string mesh_json(const MeshShape& shape);  ///< {"dp":..,"tp":..,"pp":..,"cp":..}

/// This rank's place in the mesh and one communicator per axis. Owns the four axis
/// groups; borrows the world communicator, which must outlive it.
class Mesh {
 public:
  /// Splits `world` into the four axis groups; world->size() must equal shape.world().
  Mesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }  ///< the mesh's size along each axis
  const MeshCoord& coord() const { return coord_; }  ///< this rank's coordinates
  Communicator& world() { return world_; }  ///< every rank of the job (the one passed in)
  /// The ranks that differ from this one only in dp; this rank's index there is coord().dp.
  Communicator& dp() { return *dp_; }
  /// The ranks that differ from this one only in pp; this rank's index there is coord().pp.
  Communicator& pp() { return *pp_; }
  /// The ranks that differ from this one only in cp; this rank's index there is coord().cp.
  Communicator& cp() { return *cp_; }
  /// The ranks that differ from this one only in tp; this rank's index there is coord().tp.
  Communicator& tp() { return *tp_; }

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoord coord_;
  std::unique_ptr<Communicator> dp_, pp_, cp_, tp_;
};

}  // namespace gpt
