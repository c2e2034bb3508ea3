// The process mesh: a world rank <-> coordinates (dp, pp, cp, tp), and one
// communicator per axis.
//
// The rank is the mixed-radix number whose digits are the coordinates, tp the lowest:
//   rank = ((dp_i * pp + pp_i) * cp + cp_i) * tp + tp_i
// e.g. dp=2 x tp=2: ranks 0,1 are dp 0 (tp 0,1) and ranks 2,3 are dp 1. So launching
// ranks node by node puts a tensor-parallel group (the most communication per step) on
// one node, and the data-parallel groups (the least) across nodes.
//
// The group of an axis holds the ranks that agree on the other three coordinates; its
// members are ordered by their coordinate on the axis, so a rank's index in, say, its
// tp group is its tp coordinate. With Communicator::split that is: colour = the rank
// the other three coordinates give with this axis's coordinate set to 0 (one number per
// group), key = the coordinate along the axis.
#include "common/mesh.h"

#include "common/error.h"

namespace gpt {
namespace {

std::string shape_text(const MeshShape& s) {
  return "dp=" + std::to_string(s.dp) + " x pp=" + std::to_string(s.pp) + " x cp=" + std::to_string(s.cp) +
         " x tp=" + std::to_string(s.tp);
}

void check_shape(const MeshShape& s) {
  if (s.dp < 1 || s.pp < 1 || s.cp < 1 || s.tp < 1)
    fail("mesh " + shape_text(s) + ": every axis needs at least one rank");
}

}  // namespace

MeshCoord mesh_coord(const MeshShape& shape, int rank) {
  check_shape(shape);
  if (rank < 0 || rank >= shape.world())
    fail("mesh " + shape_text(shape) + " has ranks 0.." + std::to_string(shape.world() - 1) + ", not " +
         std::to_string(rank));
  MeshCoord c;
  c.tp = rank % shape.tp;
  rank /= shape.tp;
  c.cp = rank % shape.cp;
  rank /= shape.cp;
  c.pp = rank % shape.pp;
  c.dp = rank / shape.pp;
  return c;
}

int mesh_rank(const MeshShape& shape, const MeshCoord& c) {
  check_shape(shape);
  if (c.dp < 0 || c.dp >= shape.dp || c.pp < 0 || c.pp >= shape.pp || c.cp < 0 || c.cp >= shape.cp || c.tp < 0 ||
      c.tp >= shape.tp)
    fail("mesh " + shape_text(shape) + ": coordinates (dp " + std::to_string(c.dp) + ", pp " + std::to_string(c.pp) +
         ", cp " + std::to_string(c.cp) + ", tp " + std::to_string(c.tp) + ") are outside it");
  return ((c.dp * shape.pp + c.pp) * shape.cp + c.cp) * shape.tp + c.tp;
}

std::string mesh_json(const MeshShape& s) {
  return "{\"dp\":" + std::to_string(s.dp) + ",\"tp\":" + std::to_string(s.tp) + ",\"pp\":" + std::to_string(s.pp) +
         ",\"cp\":" + std::to_string(s.cp) + "}";
}

Mesh::Mesh(Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) {
  check_shape(shape);
  if (world.size() != shape.world())
    fail("mesh " + shape_text(shape) + " needs " + std::to_string(shape.world()) + " ranks but the world has " +
         std::to_string(world.size()));
  coord_ = mesh_coord(shape, world.rank());

  // One split per axis, in the same order on every rank (split is collective).
  auto group = [&](int MeshCoord::*axis) {
    MeshCoord first = coord_;
    first.*axis = 0;
    return world.split(mesh_rank(shape, first), coord_.*axis);
  };
  dp_ = group(&MeshCoord::dp);
  pp_ = group(&MeshCoord::pp);
  cp_ = group(&MeshCoord::cp);
  tp_ = group(&MeshCoord::tp);
}

std::unique_ptr<Communicator> split_dp_cp(Mesh& mesh) {
  MeshCoord first = mesh.coord();  // the group's colour: its rank with dp = cp = 0
  first.dp = 0, first.cp = 0;
  return mesh.world().split(mesh_rank(mesh.shape(), first), mesh.coord().dp * mesh.shape().cp + mesh.coord().cp);
}

}  // namespace gpt
