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

/// Ranks along each axis of the mesh; each must be at least 1 (1: the axis is unused).
struct MeshShape {
  int dp = 1;  ///< data-parallel degree: model replicas, each fed its own batches
  int pp = 1;  ///< pipeline-parallel degree: stages the layers are divided into
  int cp = 1;  ///< context-parallel degree: chunks each sequence is divided into
  int tp = 1;  ///< tensor-parallel degree: ranks sharing each layer's tensors
  int world() const { return dp * pp * cp * tp; }  ///< total ranks the mesh needs
};

/// A rank's position in the mesh: each coordinate in [0, the shape's size on that axis).
struct MeshCoord {
  int dp = 0;  ///< index along the data-parallel axis: which replica
  int pp = 0;  ///< index along the pipeline-parallel axis: which stage of layers
  int cp = 0;  ///< index along the context-parallel axis: which chunks of each sequence
  int tp = 0;  ///< index along the tensor-parallel axis: which slice of the tensors
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

/// A new communicator over the ranks that differ from this one only in dp and cp. Under
/// context parallelism they hold the same weight slices (cp splits the sequence, not the
/// weights) and each computes gradients from tokens of its own, so the gradients are
/// reduced, and a ZeRO stage shards, over all dp x cp of them: the gradient group. This
/// rank's index there is coord().dp * cp + coord().cp. Collective over the world.
std::unique_ptr<Communicator> split_dp_cp(Mesh& mesh);

}  // namespace gpt
