// Prints what each rank of a stage 11 run will hold at its peak, before anything runs:
// weights, gradients, optimizer state and activations by the formulas the trainer prints
// beside its allocations (memory_plan.h), for the trainer's config and keys.
//
//   memory_plan [--config FILE] [--set key=value]... [--ranks N] [--by-rank]   (--ranks=N too)
//
// The keys are the trainer's (--config FILE, --set key=value or key=value, as it reads
// them), checked as it checks them but for the files a run reads and this machine's memory.
// --ranks N: the job's ranks (default: dp x pp x cp x tp, dp taken as 1 when it is 0);
// dp = 0 fills the ranks as the trainer does. The table has one row per pipeline rank (its
// tp rank 0, the first of its dp x cp ranks: the others hold as much, give or take a
// ZeRO shard's rounding and a vocabulary slice); --by-rank prints every rank's line in
// the trainer's form instead ("rank N: params X, grads Y, optimizer Z, activations W
// bytes", "-" where there is no closed form).
// e.g. build/bin/memory_plan --config configs/gpt2-124m.json --set pp=4 --set schedule=1f1b
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cli.h"
#include "common/config.h"
#include "common/driver.h"
#include "common/error.h"
#include "common/recompute.h"
#include "common/tool_options.h"
#include "stages/09_pipeline_interleaved/schedules.h"
#include "stages/11_4d/memory_plan.h"
#include "stages/11_4d/stage_spec.h"

using namespace gpt;

namespace {

constexpr const char* kUsage =
    "usage: memory_plan [--config FILE] [--set key=value | key=value]... [--ranks N] [--by-rank]\n"
    "Prints what each rank of stage 11 holds at its peak (weights, gradients, optimizer state,\n"
    "activations), from the configuration alone: the formulas a run prints beside what it\n"
    "allocates. --ranks: the job's ranks (default dp x pp x cp x tp); --by-rank: every rank.\n";

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", double(bytes) / (1 << 20));
  return text;
}

// "0-2 +emb (4)": a chunk's layers, the embeddings or the head it also runs, and its slots.
std::string chunk_text(const ChunkPlan& c, int last_stage) {
  std::string s = std::to_string(c.layers.begin) + "-" + std::to_string(c.layers.end - 1);
  if (c.stage == 0) s += " +emb";
  if (c.stage == last_stage) s += " +head";
  return s + " (" + std::to_string(c.slots) + ")";
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("memory_plan", [&] {
    if (asks_for_help(argc, argv)) {
      std::printf("%s", kUsage);
      return 0;
    }
    // The trainer's --config and --set, read by its own reader; what is left is the tool's.
    const ConfigArgs args = read_config_args(argc, argv);
    int ranks = 0;
    bool by_rank = false;
    for (size_t i = 0; i < args.rest.size(); ++i) {
      const std::string& a = args.rest[i];
      if (a == "--by-rank") {
        by_rank = true;
      } else if (a == "--ranks" || a.starts_with("--ranks=")) {
        require(ranks == 0, "--ranks given twice; give the job's ranks once");
        if (a == "--ranks") require(i + 1 < args.rest.size(), "--ranks needs a value: --ranks N");
        const std::string value = a == "--ranks" ? args.rest[++i] : a.substr(std::string("--ranks=").size());
        ranks = positive_int_option("--ranks", value);
      } else {
        fail("unknown argument '" + a + "' (see --help)");
      }
    }
    Config cfg;
    apply_config_args(cfg, args);
    // The plan reads no file: the sample's tokenizer and the eval's choices are checked by
    // the run that uses them, and the model copies they make are not in the plan.
    cfg.sample_tokens = 0, cfg.tokenizer = "bytes", cfg.eval_choices.clear(), cfg.eval_choices_limit = 0;
    // The trainer's checks (stage_main), but for this machine's memory: the plan is for any.
    const StageSpec spec = stage_11_spec();
    require_axes(cfg, spec);
    require(cfg.precision != "fp64",
            "precision=fp64: stage 11 trains in fp32 or bf16; the fp64 ground truth is stage 01's");
    require(cfg.test_grad_scale == 1.0,
            "test_grad_scale: stage 11 does not read it (a negative control of stage 01's tests)");
    validate(cfg, 1, /*this_machine=*/false);  // the axes at least 1 and their product an int
    if (ranks == 0) ranks = std::max(cfg.dp, 1) * cfg.tp * cfg.pp * cfg.cp;
    const MeshShape shape = mesh_shape_for(cfg, ranks);
    validate(cfg, shape.dp, /*this_machine=*/false);
    spec.checks(cfg, shape);

    const int v = cfg.virtual_stages, last_stage = shape.pp * v - 1;
    if (by_rank) {
      for (int rank = 0; rank < shape.world(); ++rank) {
        const MemoryLedger& m = plan_rank(cfg, shape, rank).memory;
        const size_t params = m.get(MemKind::Params);
        std::printf("rank %d: params %s, grads %zu, optimizer %zu, activations %zu bytes\n", rank,
                    params > 0 ? std::to_string(params).c_str() : "-", m.get(MemKind::Grads),
                    m.get(MemKind::Optimizer), m.get(MemKind::Activations));
      }
      return 0;
    }
    const Recompute recompute = parse_recompute(cfg.activation_checkpointing);
    const int m = cfg.grad_accum(shape.dp);
    std::printf("memory plan, stage 11: dp %d x pp %d (%s, %d chunk%s per rank) x cp %d x tp %d%s, zero=%d, %s, "
                "%s%s\n",
                shape.dp, shape.pp, configured_schedule(cfg).c_str(), v, v == 1 ? "" : "s", shape.cp, shape.tp,
                cfg.sequence_parallel ? " sequence parallel" : "", cfg.zero, cfg.precision.c_str(),
                recompute == Recompute::None ? "no" : recompute_name(recompute), " recompute");
    std::printf("micro-batch %d x %d tokens (%d on a rank), %d micro-batch%s a step\n", cfg.micro_batch_size,
                cfg.seq_len, cfg.seq_len / shape.cp, m, m == 1 ? "" : "es");
    std::printf("MiB at the peak on each pipeline rank's tp rank 0, the first of its %d dp x cp ranks "
                "(layers (activation slots) of each chunk; the sets of a block pool they share):\n",
                shape.dp * shape.cp);
    std::printf("  %-7s %-40s %10s %10s %10s %12s %10s\n", "pp rank", "chunks", "params", "grads", "optimizer",
                "activations", "total");
    for (int r = 0; r < shape.pp; ++r) {
      const RankPlan plan = plan_rank(cfg, shape, mesh_rank(shape, MeshCoord{0, r, 0, 0}));
      std::string chunks;
      for (const ChunkPlan& c : plan.chunks) chunks += (chunks.empty() ? "" : ", ") + chunk_text(c, last_stage);
      if (plan.block_pool_sets > 0) chunks += "; pool " + std::to_string(plan.block_pool_sets);
      const MemoryLedger& mem = plan.memory;
      const size_t params = mem.get(MemKind::Params);
      std::printf("  %-7d %-40s %10s %10s %10s %12s %10s\n", r, chunks.c_str(), params > 0 ? mib(params).c_str() : "-",
                  mib(mem.get(MemKind::Grads)).c_str(), mib(mem.get(MemKind::Optimizer)).c_str(),
                  mib(mem.get(MemKind::Activations)).c_str(), params > 0 ? mib(mem.total()).c_str() : "-");
    }
    std::printf("Not counted: communication buffers, and the whole-model copy a sample or an evaluation makes%s.\n",
                v > 1 && cfg.zero == 3 ? "; '-': ZeRO-3's gathered weights with several chunks have no closed form"
                                       : "");
    return 0;
  });
}
