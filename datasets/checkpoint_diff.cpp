// checkpoint_diff: two checkpoints of one model compared tensor by tensor.
//
//   build/bin/checkpoint_diff A B [--kinds param,adam_m,adam_v] [--summary]
//
// A and B are checkpoints (step_N directories) or run directories (their latest).
//
// Checkpoints are layout-independent (docs/checkpoints.md), so any two compare, whatever
// stage and mesh wrote them: a ZeRO-3 run against DDP, a pipeline against stage 01. Every
// tensor is read from both as a resume reads it (checksums and values checked), into
// doubles: an fp32 file widens exactly, so an fp64 run's checkpoint and an fp32 run's
// compare value for value. For each tensor, with a its values in A and b in B:
//
//   differ     how many elements a_i != b_i
//   max |a-b|  the largest difference of one element
//   rel        ||a - b||_2 / ||b||_2, the difference against B's size (B is the reference)
//
// and the same over each kind as a whole. Values compare as numbers: -0 equals +0, and an
// fp32 value equals its fp64 widening. rel is infinite where B's tensor is all zero and A's
// is not (AdamW's moments at step 0). The sums run in long double: an fp64 checkpoint may
// hold values whose squares overflow or underflow a double. The exit status is cmp's: 0
// when every value is equal, 1 when some differ, 2 on any error (a missing or damaged
// checkpoint, two model shapes, a bad option).
//
// The tensors are read in runs of neighbours, each at most 16M elements or one tensor
// (two copies in doubles: 0.6 GB for GPT-2's wte), so a checkpoint of any size compares in
// little memory, with one load (and one reading of the manifest) a run, not a tensor.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "common/checkpoint.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/error.h"
#include "common/gpt2_layout.h"

namespace {

constexpr const char* kUsage =
    "usage: checkpoint_diff A B [--kinds param,adam_m,adam_v] [--summary]     (or --kinds=LIST)\n"
    "\n"
    "Compares checkpoints A and B of one model shape (step_N directories, or run\n"
    "directories: their latest), tensor by tensor: how many elements differ, the largest\n"
    "difference, and ||A - B|| / ||B|| (2-norms), for each tensor of each kind and for each\n"
    "kind as a whole. Any two layouts and precisions compare (fp32 files are widened\n"
    "exactly). --kinds: the kinds to compare (default all three). --summary: each kind's\n"
    "line alone, without its table of tensors.\n"
    "Values compare as numbers (-0 equals +0). Exit status: 0 every value equal, 1 some\n"
    "differ, 2 error. A path starting with '-' is given as ./-path.\n";

// What one tensor's comparison found. long double (x87's 64-bit mantissa and 15-bit
// exponent on x86): (1e200)^2 and (1e-200)^2 stay finite and non-zero.
struct Difference {
  int64_t differ = 0;                   // elements a_i != b_i
  long double max_abs = 0;              // max |a_i - b_i|
  long double diff_sq = 0, ref_sq = 0;  // sum (a_i - b_i)^2 and sum b_i^2
  void add(const Difference& o) {
    differ += o.differ;
    max_abs = std::max(max_abs, o.max_abs);
    diff_sq += o.diff_sq;
    ref_sq += o.ref_sq;
  }
  // ||a - b|| / ||b||: 0 where equal, infinite where b is all zero and a is not.
  long double rel() const { return diff_sq == 0 ? 0.0L : ref_sq == 0 ? INFINITY : std::sqrt(diff_sq / ref_sq); }
};

Difference compare(const double* a, const double* b, int64_t n) {
  Difference d;
  for (int64_t i = 0; i < n; ++i) {
    const long double diff = static_cast<long double>(a[i]) - b[i];
    d.differ += a[i] != b[i];
    d.max_abs = std::max(d.max_abs, std::fabs(diff));
    d.diff_sq += diff * diff;
    d.ref_sq += static_cast<long double>(b[i]) * b[i];
  }
  return d;
}

// The layout's tensors in runs of neighbours, each at most 16M elements or one tensor.
std::vector<std::vector<const gpt::ParamTensor*>> runs_of_tensors(const gpt::ParamLayout& layout) {
  int64_t budget = int64_t(1) << 24;
  for (const gpt::ParamTensor& t : layout.tensors()) budget = std::max(budget, t.numel);
  std::vector<std::vector<const gpt::ParamTensor*>> runs(1);
  int64_t size = 0;
  for (const gpt::ParamTensor& t : layout.tensors()) {
    if (size + t.numel > budget && !runs.back().empty()) {
      runs.emplace_back();
      size = 0;
    }
    runs.back().push_back(&t);
    size += t.numel;
  }
  return runs;
}

// Flat elements [begin, end) of `kind` from checkpoint `path`, as doubles (a slice load:
// only their bytes are read).
std::vector<double> read_slice(const std::string& path, const gpt::ParamLayout& layout, const std::string& kind,
                               int64_t begin, int64_t end) {
  std::vector<double> values(size_t(end - begin));
  gpt::load_checkpoint(path, layout, {{kind, nullptr, begin, end, values.data()}});
  return values;
}

// The two checkpoints' model shapes must agree, field by field (a diff of two models
// would compare unrelated numbers at every offset).
gpt::ModelConfig common_model(const std::string& a, const std::string& b) {
  const gpt::ModelConfig ma = gpt::checkpoint_model(a), mb = gpt::checkpoint_model(b);
  const std::pair<const char*, std::pair<int, int>> fields[] = {
      {"n_layer", {ma.n_layer, mb.n_layer}},          {"n_embd", {ma.n_embd, mb.n_embd}},
      {"n_head", {ma.n_head, mb.n_head}},             {"block_size", {ma.block_size, mb.block_size}},
      {"vocab_size", {ma.vocab_size, mb.vocab_size}}};
  for (const auto& [name, values] : fields)
    if (values.first != values.second)
      gpt::fail("the checkpoints are of two model shapes: " + std::string(name) + " is " +
                std::to_string(values.first) + " in " + a + " but " + std::to_string(values.second) + " in " + b);
  return ma;
}

// A manifest whose model is larger than its files (one edited by hand) would have the
// tool allocate the claimed tensors before the load finds the files short: each file
// must hold at least the model's parameters at 4 bytes (the load checks the exact size).
// So no tensor read here is larger than twice the bytes on disk.
void require_files_hold_model(const std::string& checkpoint, const std::vector<std::string>& kinds,
                              const gpt::ParamLayout& layout) {
  for (const std::string& kind : kinds) {
    const std::string file = checkpoint + "/" + kind + ".bin";
    std::error_code ec;
    const uintmax_t bytes = std::filesystem::file_size(file, ec);
    if (!ec && int64_t(bytes) < layout.total() * 4)
      gpt::fail(file + " holds " + std::to_string(bytes) + " bytes, fewer than the " +
                std::to_string(layout.total() * 4) + " that the manifest's model (" + std::to_string(layout.total()) +
                " parameters) needs");
  }
}

std::vector<std::string> parse_kinds(const std::string& list) {
  std::vector<std::string> kinds;
  std::set<std::string> seen;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string kind = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (kind.empty()) gpt::fail("--kinds: an empty entry in '" + list + "' (param,adam_m,adam_v)");
    if (kind != "param" && kind != "adam_m" && kind != "adam_v")
      gpt::fail("--kinds: '" + kind + "' is not a kind a checkpoint holds (param, adam_m, adam_v)");
    if (!seen.insert(kind).second) gpt::fail("--kinds: '" + kind + "' is given twice");
    kinds.push_back(kind);
    if (comma == std::string::npos) return kinds;
    start = comma + 1;
  }
}

int run(int argc, char** argv) {
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<std::string> paths;
  std::string kinds_list = "param,adam_m,adam_v";
  bool kinds_given = false, summary = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--kinds" || arg.starts_with("--kinds=")) {  // --kinds LIST or --kinds=LIST
      if (kinds_given) gpt::fail("--kinds is given twice; give it once");
      if (arg == "--kinds" && i + 1 == argc) gpt::fail("--kinds needs a value (param,adam_m,adam_v)");
      kinds_list = arg == "--kinds" ? argv[++i] : arg.substr(8);
      kinds_given = true;
    } else if (arg == "--summary") {
      summary = true;  // each kind's line, without its table of tensors
    } else if (arg.size() > 1 && arg[0] == '-') {
      gpt::fail("unknown option '" + arg + "'\n" + kUsage);
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.size() != 2)
    gpt::fail("two checkpoints are compared, " + std::to_string(paths.size()) + " given\n" + kUsage);
  const std::vector<std::string> kinds = parse_kinds(kinds_list);
  const std::string a = gpt::checkpoint_or_latest(paths[0]);
  const std::string b = gpt::checkpoint_or_latest(paths[1]);
  const gpt::ParamLayout layout(common_model(a, b));
  require_files_hold_model(a, kinds, layout);
  require_files_hold_model(b, kinds, layout);

  std::printf("checkpoint_diff: A = %s\n                 B = %s (the reference of rel)\n", a.c_str(), b.c_str());
  // The columns as wide as the longest name and shape ("adam_m/h.11.attn.c_attn.weight").
  int name_width = 0, shape_width = 0;
  for (const gpt::ParamTensor& t : layout.tensors()) {
    name_width = std::max(name_width, int(t.name.size()) + 7);
    shape_width = std::max(shape_width, int(gpt::shape_text(t.shape).size()));
  }
  bool all_equal = true;
  for (const std::string& kind : kinds) {
    Difference whole;
    int identical = 0;
    std::vector<std::string> rows;
    for (const std::vector<const gpt::ParamTensor*>& run : runs_of_tensors(layout)) {
      const int64_t begin = run.front()->offset, end = run.back()->offset + run.back()->numel;
      const std::vector<double> in_a = read_slice(a, layout, kind, begin, end);
      const std::vector<double> in_b = read_slice(b, layout, kind, begin, end);
      for (const gpt::ParamTensor* t : run) {
        const Difference d = compare(in_a.data() + (t->offset - begin), in_b.data() + (t->offset - begin), t->numel);
        whole.add(d);
        identical += d.differ == 0;
        char row[256];
        std::snprintf(row, sizeof row, "  %-*s %-*s %12lld %12.6Lg %12.6Lg\n", name_width,
                      (kind + "/" + t->name).c_str(), shape_width, gpt::shape_text(t->shape).c_str(),
                      static_cast<long long>(d.differ), d.max_abs, d.rel());
        rows.push_back(row);
      }
    }
    all_equal = all_equal && whole.differ == 0;
    std::printf("\n%s: %d of %zu tensors equal; %lld of %lld elements differ; max |a-b| %.6Lg; "
                "||A - B|| / ||B|| = %.6Lg\n",
                kind.c_str(), identical, layout.tensors().size(), static_cast<long long>(whole.differ),
                static_cast<long long>(layout.total()), whole.max_abs, whole.rel());
    if (summary) continue;
    std::printf("  %-*s %-*s %12s %12s %12s\n", name_width, "tensor", shape_width, "shape", "differ", "max |a-b|",
                "rel");
    for (const std::string& row : rows) std::fputs(row.c_str(), stdout);
  }
  std::printf("\n%s\n", all_equal ? "every value equal" : "the checkpoints differ");
  return all_equal ? 0 : 1;
}

}  // namespace

// Any error exits 2, an internal one too (run_main's 1 would read as "the checkpoints differ").
int main(int argc, char** argv) {
  int compared = 0;
  const int status = gpt::run_main("checkpoint_diff", [&] {
    compared = run(argc, argv);
    return 0;
  });
  return status != 0 ? 2 : compared;
}
