// The shared driver's layout checks (common/driver.h): the mesh from the config keys
// dp, tp, pp, cp against the job's rank count, and a stage refusing by name an axis it
// does not implement.
#include <catch2/catch.hpp>

#include <string>

#include "common/driver.h"
#include "common/error.h"

using namespace gpt;

namespace {
Config with_axes(int dp, int tp, int pp, int cp, int vs = 1) {
  Config c;
  c.dp = dp, c.tp = tp, c.pp = pp, c.cp = cp, c.virtual_stages = vs;
  return c;
}
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("driver: the mesh takes tp, pp, cp from the config and dp from the rest", "[config][driver]") {
  const MeshShape a = mesh_shape_for(with_axes(0, 2, 1, 1), 8);
  CHECK((a.dp == 4 && a.tp == 2 && a.pp == 1 && a.cp == 1));
  const MeshShape b = mesh_shape_for(with_axes(2, 2, 3, 1), 12);
  CHECK((b.dp == 2 && b.tp == 2 && b.pp == 3 && b.cp == 1));
  const MeshShape c = mesh_shape_for(with_axes(0, 1, 1, 1), 5);
  CHECK((c.dp == 5 && c.world() == 5));
}

TEST_CASE("driver: a mesh that does not match the ranks names the keys and the rank count", "[config][driver]") {
  const std::string odd = error_of([] { mesh_shape_for(with_axes(0, 3, 1, 1), 8); });
  CHECK(odd.find("tp=3") != std::string::npos);
  CHECK(odd.find("8 ranks") != std::string::npos);
  const std::string wrong_dp = error_of([] { mesh_shape_for(with_axes(3, 2, 1, 1), 8); });
  CHECK(wrong_dp.find("dp=3") != std::string::npos);
  CHECK(wrong_dp.find("has 8") != std::string::npos);
  CHECK(error_of([] { mesh_shape_for(with_axes(2, 2, 1, 1), 4); }).empty());  // control: a matching mesh passes
}

TEST_CASE("driver: a stage refuses by name an axis it does not implement", "[config][driver]") {
  const StageSpec zero1{"03_zero1"};
  const std::string tp = error_of([&] { require_axes(with_axes(0, 2, 1, 1), zero1); });
  CHECK(tp.find("tp=2") != std::string::npos);
  CHECK(tp.find("03_zero1") != std::string::npos);
  CHECK(tp.find("tensor parallelism") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 2, 1), zero1); }).find("pp=2") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 2), zero1); }).find("cp=2") != std::string::npos);
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 1, 2), zero1); }).find("virtual_stages=2") != std::string::npos);
  StageSpec tensor{"06_tensor_parallel"};
  tensor.tp = true;
  CHECK(error_of([&] { require_axes(with_axes(0, 2, 1, 1), tensor); }).empty());  // an implemented axis passes
  CHECK(error_of([&] { require_axes(with_axes(0, 1, 1, 1), zero1); }).empty());
  // activation_checkpointing: refused where the stage does not read it, read where it does.
  Config recompute = with_axes(0, 1, 1, 1);
  for (const char* mode : {"selective", "full"}) {
    recompute.activation_checkpointing = mode;
    CHECK(error_of([&] { require_axes(recompute, zero1); }).find(std::string("activation_checkpointing=") + mode) !=
          std::string::npos);
  }
  StageSpec four_d{"11_4d"};
  four_d.activation_checkpointing_key = true;
  CHECK(error_of([&] { require_axes(recompute, four_d); }).empty());
  recompute.activation_checkpointing = "none";
  CHECK(error_of([&] { require_axes(recompute, zero1); }).empty());
}
