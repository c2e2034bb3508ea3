// llmc_model: llm.c's model files (gpt2_124M.bin) to this project's checkpoints and back.
//
//   build/bin/llmc_model import MODEL.bin RUN_DIR       -> RUN_DIR/step_00000000/
//   build/bin/llmc_model export CHECKPOINT MODEL.bin [--bf16]
//
// import writes a checkpoint of step 0 holding the file's weights and zero AdamW moments,
// which every stage resumes (`--set resume=RUN_DIR/step_00000000`): a run starts from
// GPT-2's weights, in any layout, as from its own random ones. export writes a
// checkpoint's weights (a run directory's latest, given the run directory) as llm.c's
// version 3 (fp32) or, with --bf16, version 5. The
// format, and how its arrays map to the layout's tensors, is in common/llmc_model.h.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "common/checkpoint.h"
#include "common/cli.h"
#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/gpt2_layout.h"
#include "common/llmc_model.h"
#include "common/run_lock.h"

namespace {

constexpr const char* kUsage =
    "usage: llmc_model import MODEL.bin RUN_DIR\n"
    "       llmc_model export CHECKPOINT MODEL.bin [--bf16]\n"
    "\n"
    "import: llm.c's model file (version 1 or 3: fp32; 5: bf16) becomes RUN_DIR/step_00000000,\n"
    "  a checkpoint of step 0 (the weights, AdamW moments zero) that every stage resumes\n"
    "  (RUN_DIR: new, or without checkpoints, and no job training in it):\n"
    "  train --config ... --set resume=RUN_DIR/step_00000000, with the file's model shape\n"
    "  (n_layer, n_head, n_embd, vocab_size; block_size its max_seq_len).\n"
    "export: a checkpoint's weights (CHECKPOINT: a step_N directory, or a run directory:\n"
    "  its latest) become llm.c's model file, version 3 (fp32), or 5 (bf16, rounded to\n"
    "  nearest even) with --bf16. MODEL.bin must not exist yet.\n";

int import_model(const std::string& model_path, const std::string& run_dir) {
  const gpt::LlmcHeader header = gpt::read_llmc_header(model_path);
  // The trainers' limit (config.cpp): a checkpoint past it would be imported, then refused
  // by every resume.
  if (header.model.vocab_size > 65536)
    gpt::fail(model_path + ": vocab_size=" + std::to_string(header.model.vocab_size) +
              " is more than 65536, the most a token shard's uint16 ids can name: no stage could resume it");
  const std::string step0 = run_dir + "/step_00000000";
  gpt::require_outside_checkpoint_dirs(run_dir, "RUN_DIR", /*directory=*/true);
  std::error_code ec;
  if (std::filesystem::exists(step0, ec))
    gpt::fail("RUN_DIR '" + run_dir + "' already holds " + step0 + "; name another RUN_DIR");
  const gpt::ParamLayout layout(header.model);
  std::vector<float> params = gpt::read_llmc_model(model_path, layout);
  std::vector<float> zeros(params.size(), 0.0f);
  // The file is good: now the directory. A job training there holds its lock, and its
  // pruning (keep_checkpoints) would delete the step-0 checkpoint written beside its own;
  // a directory with checkpoints already would rank step 0 below them (resume=latest)
  // and prune it first. So the import takes the lock as a job does, and wants a run
  // directory without checkpoints.
  const gpt::RunDirLock lock(run_dir);
  if (const std::string latest = gpt::latest_checkpoint(run_dir); !latest.empty())
    gpt::fail("RUN_DIR '" + run_dir + "' holds checkpoints already (the latest " + latest +
              "): a step-0 checkpoint beside them would be ranked below them by resume=latest and pruned by "
              "keep_checkpoints; import into a new or empty directory");

  gpt::Config cfg;  // the manifest records a config: the defaults, with the file's shape
  cfg.model = header.model;
  cfg.seq_len = std::min(cfg.seq_len, cfg.model.block_size);
  // No training data: the default train_data, where the working directory has one, would
  // put its token count in the data position, as if this checkpoint had read from it.
  cfg.train_data.clear();
  gpt::CheckpointState state;
  state.step = 0;
  state.layout_json = "{\"imported_from\": \"llm.c model file, version " + std::to_string(header.version) + "\"}";
  const int64_t n = layout.total();
  const std::string written = gpt::save_checkpoint(
      run_dir, cfg, layout, state,
      {{"param", params.data(), 0, n}, {"adam_m", zeros.data(), 0, n}, {"adam_v", zeros.data(), 0, n}});
  const gpt::ModelConfig& m = header.model;
  std::printf("%s: llm.c model file version %d: n_layer=%d n_head=%d n_embd=%d vocab_size=%d max_seq_len=%d, "
              "%lld parameters\n",
              model_path.c_str(), header.version, m.n_layer, m.n_head, m.n_embd, m.vocab_size, m.block_size,
              static_cast<long long>(n));
  std::printf("-> %s (resume it with --set resume=%s and that model shape)\n", written.c_str(), written.c_str());
  return 0;
}

int export_model(const std::string& given, const std::string& model_path, bool bf16) {
  const std::string checkpoint = gpt::checkpoint_or_latest(given);  // a run directory: its latest
  if (gpt::name_taken(model_path))
    gpt::fail("MODEL.bin '" + model_path + "' exists; name a new file (nothing is overwritten)");
  gpt::require_outside_checkpoint_dirs(model_path, "MODEL.bin");
  const gpt::ParamLayout layout(gpt::checkpoint_model(checkpoint));
  std::vector<float> params(size_t(layout.total()));
  gpt::load_checkpoint(checkpoint, layout, {{"param", params.data(), 0, layout.total()}});
  const int version = bf16 ? 5 : 3;
  gpt::write_llmc_model(model_path, layout, params.data(), version);
  std::printf("%s -> %s (llm.c model file version %d, %lld parameters)\n", checkpoint.c_str(), model_path.c_str(),
              version, static_cast<long long>(layout.total()));
  return 0;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (gpt::asks_for_help(argc, argv)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args.empty()) gpt::fail(std::string("no command given\n") + kUsage);
  if (args[0] == "import") {
    if (args.size() != 3) gpt::fail("import takes MODEL.bin and RUN_DIR\n" + std::string(kUsage));
    return import_model(args[1], args[2]);
  }
  if (args[0] == "export") {
    const bool bf16 = args.size() == 4 && args[3] == "--bf16";
    if (args.size() != 3 && !bf16)
      gpt::fail("export takes CHECKPOINT and MODEL.bin, and optionally --bf16\n" + std::string(kUsage));
    return export_model(args[1], args[2], bf16);
  }
  gpt::fail("unknown command '" + args[0] + "': import or export\n" + std::string(kUsage));
}

}  // namespace

int main(int argc, char** argv) {
  return gpt::run_main("llmc_model", [&] { return run(argc, argv); });
}
