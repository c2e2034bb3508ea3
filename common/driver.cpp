// The shared multi-rank driver; see driver.h.
#include "common/driver.h"

#include <omp.h>
#include <sched.h>  // sched_getaffinity, CPU_COUNT (glibc)

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/finite.h"
#include "common/launcher.h"
#include "common/layout_exchange.h"
#include "common/lead_work.h"
#include "common/mfu.h"
#include "common/run_lock.h"
#include "common/sampler.h"
#include "common/stop_request.h"
#include "common/trace.h"
#include "kernels/ops.h"

namespace gpt {

MeshShape mesh_shape_for(const Config& cfg, int ranks) {
  const std::string keys = "tp=" + std::to_string(cfg.tp) + " x pp=" + std::to_string(cfg.pp) +
                           " x cp=" + std::to_string(cfg.cp);
  // The products are taken in double first (exact below 2^53, and no wrap): the axes are
  // ints whose product need not fit one (validate() holds it to one; a caller, such as the
  // tests, may ask before it).
  const double model_ranks_exact = double(cfg.tp) * cfg.pp * cfg.cp;
  require(model_ranks_exact * std::max(cfg.dp, 1) <= ranks,
          (cfg.dp > 0 ? "dp=" + std::to_string(cfg.dp) + " x " : std::string()) + keys +
              " is more ranks than the job's " + std::to_string(ranks) +
              " (dp x pp x cp x tp must equal the ranks)");
  const int model_ranks = int(model_ranks_exact);
  if (cfg.dp == 0) {
    require(ranks % model_ranks == 0, keys + " = " + std::to_string(model_ranks) + " ranks per model replica, but the job has " +
                                          std::to_string(ranks) + " ranks, not a multiple (dp x pp x cp x tp must equal the ranks)");
    return {ranks / model_ranks, cfg.pp, cfg.cp, cfg.tp};
  }
  require(cfg.dp * model_ranks == ranks, "dp=" + std::to_string(cfg.dp) + " x " + keys + " = " +
                                             std::to_string(cfg.dp * model_ranks) + " ranks, but the job has " +
                                             std::to_string(ranks) + " (dp x pp x cp x tp must equal the ranks)");
  return {cfg.dp, cfg.pp, cfg.cp, cfg.tp};
}

void require_axes(const Config& cfg, const StageSpec& spec) {
  auto refuse = [&](const char* key, int value, const char* technique) {
    fail(std::string(key) + "=" + std::to_string(value) + ": stage " + spec.name + " does not implement " + technique +
         " (" + key + " must be 1 here)");
  };
  if (cfg.tp > 1 && !spec.tp) refuse("tp", cfg.tp, "tensor parallelism");
  if (cfg.pp > 1 && !spec.pp) refuse("pp", cfg.pp, "pipeline parallelism");
  if (cfg.cp > 1 && !spec.cp) refuse("cp", cfg.cp, "context parallelism");
  if (cfg.virtual_stages > 1 && !spec.virtual_stages)
    refuse("virtual_stages", cfg.virtual_stages, "interleaved pipeline chunks");
  if (cfg.cp_split != Config().cp_split && !spec.cp)
    fail("cp_split=" + cfg.cp_split + ": stage " + spec.name +
         " does not implement context parallelism, which the key configures; leave it at its default");
  if (cfg.sequence_parallel && !spec.tp)
    fail(std::string("sequence_parallel=true: stage ") + spec.name +
         " does not implement tensor parallelism, which sequence parallelism is part of");
  if (!cfg.schedule.empty() && !spec.schedule_key)
    fail("schedule=" + cfg.schedule + ": stage " + spec.name +
         " does not read the key (stage 07 is GPipe, 08 is 1F1B; stages 09 and 11 choose); leave it empty");
  // bucket_mb and comm are left to any stage (scripts pass one set to every stage they
  // compare); allreduce picks between two algorithms of stage 02 only.
  if (cfg.allreduce != Config().allreduce && !spec.allreduce_key)
    fail("allreduce=" + cfg.allreduce + ": stage " + spec.name +
         " does not read the key (stage 02's gradient all-reduce: its ring or the backend's); leave it ring");
  if (cfg.activation_checkpointing != "none" && !spec.activation_checkpointing_key)
    fail("activation_checkpointing=" + cfg.activation_checkpointing + ": stage " + spec.name +
         " does not implement activation checkpointing (stage 11 does); leave it none");
  if (cfg.zero != 0 && !spec.zero_key)
    fail("zero=" + std::to_string(cfg.zero) + ": stage " + spec.name +
         " does not read the key (stages 03, 04 and 05 are ZeRO-1, -2 and -3 by construction); leave it 0");
  if (!cfg.zero3_prefetch && !spec.zero3 && !(spec.zero_key && cfg.zero == 3))
    fail(std::string("zero3_prefetch=false: stage ") + spec.name +
         (spec.zero_key ? " at zero=" + std::to_string(cfg.zero) : "") +
         " does not run ZeRO-3, whose gathers the key is about (stage 05 does, and zero=3 in stages 06+); "
         "leave it true");
}

namespace {

// A refusal the ranks have already agreed on and printed (agree_on_checks): each rank
// returns status 2, with no further message and no abort.
struct JobRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An error on one rank must not leave the others blocked in a collective: the failing
// rank prints its message (naming itself) and aborts the whole job with the error's
// status; with one rank the error propagates to run_main, which does the same. Errors the
// ranks have agreed on (JobRefused, and an AgreedError of the whole job) need no abort.
template <class F>
int abort_job_on_error(Communicator& world, F&& body) {
  try {
    return body();
  } catch (const JobRefused&) {
    return 2;
  } catch (const std::exception& e) {
    if (world.size() == 1) throw;
    // Bad input every rank of the job found together (a checkpoint read or written by all
    // of them): said once, and each rank returns. A smaller group's ends in the abort below.
    if (const auto* agreed = dynamic_cast<const AgreedError*>(&e); agreed && agreed->ranks == world.size()) {
      if (world.rank() == 0) std::fprintf(stderr, "train: error: %s\n", e.what());
      std::fflush(stderr);
      return 2;
    }
    const bool user = dynamic_cast<const UserError*>(&e) != nullptr;
    // A collective step's error names the rank it came from ("rank 0: ..."): on that rank
    // itself the name is said once, in the prefix.
    std::string message = e.what();
    const std::string own = "rank " + std::to_string(world.rank()) + ": ";
    if (message.rfind(own, 0) == 0) message.erase(0, own.size());
    std::fprintf(stderr, "train: rank %d: %s: %s\n", world.rank(), user ? "error" : "internal error", message.c_str());
    std::fflush(stderr);
    world.abort(user ? 2 : 1);
    return user ? 2 : 1;
  }
}

// Rank 0's `mine`, on every rank.
std::string rank0_text(Communicator& world, const std::string& mine) {
  uint64_t size = mine.size();
  world.broadcast(&size, sizeof size, DType::Byte, 0);
  std::string lead = world.rank() == 0 ? mine : std::string(size, '\0');
  world.broadcast(lead.data(), size_t(size), DType::Byte, 0);
  return lead;
}

// Checks that every rank of a job makes on the same command line: a bad key or a mesh
// that does not fit the ranks fails on all of them alike, and if each printed it, a job of
// 8 ranks would say the same thing 8 times before Open MPI's abort banner. So each rank
// runs `checks`, and one all-reduce counts the ranks that failed. None: the job goes on.
// Otherwise a message every rank shares is printed once, by rank 0; where they differ (a
// file missing on one machine, a lower memory limit) each failing rank prints its own,
// naming itself. Then every rank throws JobRefused: all of them return status 2, and none
// is left waiting in a collective, so nothing needs aborting.
void agree_on_checks(Communicator& world, const std::function<void()>& checks) {
  std::string error;
  try {
    checks();
  } catch (const UserError& e) {
    if (world.size() == 1) throw;
    error = e.what();
  }
  if (world.size() == 1) return;
  double failed = error.empty() ? 0 : 1;
  world.all_reduce(&failed, 1, DType::F64);
  if (failed == 0) return;
  const std::string lead = rank0_text(world, error);
  double shared = !error.empty() && error == lead ? 1 : 0;
  world.all_reduce(&shared, 1, DType::F64);
  if (shared == world.size()) {
    if (world.rank() == 0) std::fprintf(stderr, "train: error: %s\n", error.c_str());
  } else if (!error.empty()) {
    std::fprintf(stderr, "train: rank %d: error: %s\n", world.rank(), error.c_str());
  }
  std::fflush(stderr);
  throw JobRefused(error.empty() ? "another rank refused the run" : error);
}

// Every rank must train with rank 0's stage and configuration. mpirun's MPMD form (`-np 1
// train --set lr=1e-3 : -np 1 train --set lr=1e-2`, or two stages' binaries) or a per-rank
// wrapper script can hand the ranks different ones, and each rank would then silently
// train another model, or wait for messages its peers never send (a timeout that blames a
// lost peer). `threads` may differ (nodes with other core counts). Rank 0's texts
// (rank0_text) are broadcast first, by every rank; the comparison refuses on the ranks
// that differ, each naming itself (agree_on_checks), and none is left waiting.
void require_rank0_config(const Config& cfg, const std::string& stage, const std::string& lead_stage,
                          const std::string& lead) {
  if (lead_stage != stage)
    fail("this rank runs stage " + stage + ", rank 0 stage " + lead_stage +
         ": every rank of a job must run the same stage's trainer");
  const std::string mine = config_to_json(cfg);
  if (lead == mine) return;
  const nlohmann::json theirs = nlohmann::json::parse(lead), ours = nlohmann::json::parse(mine);
  std::string keys;
  for (const auto& [key, value] : ours.items()) {
    const nlohmann::json lead_value = theirs.value(key, nlohmann::json());
    if (key == "threads" || lead_value == value) continue;
    keys += (keys.empty() ? "" : ", ") + key + "=" + value.dump() + " (rank 0: " + lead_value.dump() + ")";
  }
  if (!keys.empty())
    fail("this rank's configuration differs from rank 0's: " + keys +
         "; every rank must run the same configuration (one --config and the same --set for all)");
}

}  // namespace

std::string thread_notes(int threads, int ranks_here, int cores, int allowed) {
  // The most threads a rank can keep busy: its CPUs, and its share of the machine's cores.
  const std::string fit = std::to_string(std::max(1, std::min(allowed, cores / std::max(1, ranks_here))));
  const std::string per_rank = std::to_string(threads) + " OpenMP thread" + (threads == 1 ? "" : "s");
  const std::string cost = ": they take turns and each step is several times slower; set threads=" + fit;
  if (threads > allowed)
    return "note: " + per_rank + " per rank on the " + std::to_string(allowed) +
           " CPU(s) this rank may run on (its affinity: mpirun binds a rank to a core unless --bind-to none)" +
           cost + " (or OMP_NUM_THREADS)\n";
  if (int64_t(threads) * ranks_here > cores) {
    const std::string crowd = "note: " + std::to_string(ranks_here) + " ranks on this machine x " + per_rank + " = " +
                              std::to_string(int64_t(threads) * ranks_here) + " threads on " + std::to_string(cores) +
                              " cores";
    // With one thread a rank there is no thread left to take away: the ranks themselves
    // outnumber the cores. They compute the same numbers, only slower.
    if (threads == 1)
      return crowd + ": they take turns, so each step is several times slower (the same numbers); for timings run at "
                     "most " + std::to_string(cores) + " ranks on this machine\n";
    return crowd + cost + " (or OMP_NUM_THREADS)\n";
  }
  return "";
}

std::string thread_notes_here() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : cores;
  return thread_notes(omp_get_max_threads(), launcher_local_size(), cores, allowed);
}

namespace {

// Keys that ask for a technique whose axis is 1 in this mesh: accepted (one config file
// serves every layout), but said, so a run is not taken for what it does not do. At tp 1
// sequence parallelism splits the rows among one rank (the same bits as without it); at
// cp 1 both splits are one chunk; at dp x cp = 1 ZeRO has one shard.
std::string idle_key_notes(const Config& cfg, const MeshShape& shape) {
  std::string notes;
  if (cfg.sequence_parallel && shape.tp == 1)
    notes += "note: sequence_parallel=true at tp=1 changes nothing: the one tensor-parallel rank holds every row\n";
  if (cfg.cp_split == "contiguous" && shape.cp == 1)  // the default, zigzag, goes unsaid
    notes += "note: cp_split=" + cfg.cp_split + " at cp=1 changes nothing: one rank holds the whole sequence\n";
  // ZeRO shards over the dp x cp ranks that hold the same weights: one rank is one shard.
  // ZeRO-1 then keeps what zero=0 keeps; ZeRO-2 and -3 add their buffers to the whole.
  const std::string z = "zero=" + std::to_string(cfg.zero);
  if (cfg.zero == 1 && shape.dp * shape.cp == 1)
    notes += "note: " + z + " at dp x cp = 1 changes nothing: one rank holds each weight, so its shard is all of it\n";
  if (cfg.zero >= 2 && shape.dp * shape.cp == 1)
    notes += "note: " + z + " at dp x cp = 1 shards nothing (one rank holds each weight), and its buffers (live " +
             "gradient buckets" + (cfg.zero == 3 ? ", gathered units" : "") + ") come on top: zero=0 holds less\n";
  return notes;
}

}  // namespace

int stage_main(int argc, char** argv, const StageSpec& spec, TrainFn train) {
  return run_main("train", [&] {
    hold_stop_signal();  // until our handler is in place, after MPI's start-up
    Config cfg;
    Device device = Device::CPU;
    Precision precision = Precision::FP32;
    // The command line, read before MPI starts. In a job of several ranks a refusal here
    // is said once the ranks can compare it (agree_on_checks), on a plain MPI world on the
    // CPU (CommOptions::ready): the backend or the device asked for may be what was refused.
    std::string refused;
    try {
      if (!parse_args(argc, argv, cfg, "train")) return 0;
      if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
      require_axes(cfg, spec);
      device = resolve_device(cfg.device);
      check_comm_options(CommOptions{cfg.comm, device, cfg.comm_timeout_s});  // refused by make_world otherwise
      ops::set_gemm(device, cfg.gemm);  // the GPU's matmuls: the hand-written GEMM or cuBLAS
      precision = parse_precision(cfg.precision);
      require(cfg.test_grad_scale == 1.0, std::string("test_grad_scale: stage ") + spec.name +
                                              " does not read it (a negative control of stage 01's tests)");
      require(precision != Precision::FP64, std::string("precision=fp64: stage ") + spec.name +
                                                " trains in fp32 or bf16; the fp64 ground truth is stage 01's");
    } catch (const UserError& e) {
#ifdef GPT_HAVE_MPI
      if (launcher_world_size() <= 1) throw;
#else
      throw;  // no world of several ranks to compare it on: make_world would refuse the launch instead
#endif
      refused = e.what();
    }
    CommOptions options = refused.empty() ? CommOptions{cfg.comm, device, cfg.comm_timeout_s} : CommOptions{};
    options.ready = refused.empty();  // any rank not ready: a plain MPI world, no device compared
    std::unique_ptr<Communicator> world = make_world(&argc, &argv, options);
    // After MPI's start-up, so that ours are the handlers; SIGTERM and SIGINT only in a
    // job of one rank (common/stop_request.h says why).
    install_stop_handlers(/*announce=*/world->rank() == 0, /*terminal_signals=*/world->size() == 1);
    return abort_job_on_error(*world, [&] {
      agree_on_checks(*world, [&] { require(refused.empty(), refused); });
      // The collectives outside the checks: a check that throws must not skip one.
      const std::string lead_stage = rank0_text(*world, spec.name);
      const std::string lead_config = rank0_text(*world, config_to_json(cfg));
      agree_on_checks(*world, [&] { require_rank0_config(cfg, spec.name, lead_stage, lead_config); });
      MeshShape shape;
      std::string resume;
      agree_on_checks(*world, [&] {
        shape = mesh_shape_for(cfg, world->size());
        validate(cfg, shape.dp);
        if (spec.checks) spec.checks(cfg, shape);
        check_data_files(cfg);
        resume = resolve_resume(cfg);  // the checkpoint to resume: there, and of this model and data stream
      });
      // Every rank resumes rank 0's checkpoint (resume=latest reads run_dir, which every
      // rank must see as one directory), or each would load and train another state.
      const std::string lead_resume = rank0_text(*world, resume);
      agree_on_checks(*world, [&] {
        require(resume == lead_resume, "resume=" + cfg.resume + " is '" + resume + "' here but '" + lead_resume +
                                           "' on rank 0: run_dir must be one directory that every rank sees");
      });
      if (world->rank() == 0) std::printf("%s%s", idle_key_notes(cfg, shape).c_str(), thread_notes_here().c_str());
      const ChoicesInTraining choices(cfg, world->rank(), world->size());
      // One job per run_dir (rank 0 holds the lock); another run's later checkpoints are
      // set aside before the first save (write_checkpoint).
      const std::unique_ptr<RunDirLock> lock = lock_run_dir(*world, cfg.run_dir, [&] {
        if (const std::string note = start_notes(cfg); !note.empty()) std::printf("%s\n", note.c_str());
        Trace::remove_rank_traces(cfg.trace_file);  // an earlier job's, before any rank's is written
      });
      Mesh mesh(*world, shape);
      Run run{cfg,
              *world,
              mesh,
              device,
              precision,
              /*part=*/nullptr,
              world_peak_flops(*world, device, precision),
              training_flops_per_token(ParamLayout(cfg.model).total(), cfg.model, cfg.seq_len),
              &choices};
      if (run.lead() && run.peak_flops)
        std::printf("device peak %.1f TFLOP/s over the job's GPUs (%s): mfu is reported against it\n",
                    *run.peak_flops / 1e12, precision_name(precision));
      // Each rank its own trace file, trace_file + .rankN.json; end_of_run writes it.
      Trace::global().enable(
          cfg.trace_file.empty() ? "" : cfg.trace_file + ".rank" + std::to_string(world->rank()) + ".json",
          world->rank());
      const int status = train(run);
      return run.stopped ? kStoppedExit : status;
    });
  });
}

// A data file's own error (missing, unreadable, damaged), with the key that named it; a
// run that validates nothing need not name a val_data.
[[noreturn]] void fail_data_key(const char* key, const UserError& e, const Config& cfg) {
  fail(std::string(key) + ": " + e.what() +
       (std::string(key) == "val_data" && cfg.val_batches == 0
            ? " (val_batches=0 validates nothing: val_data may be left empty)"
            : ""));
}

DataLoader training_data(const Config& cfg) {
  try {
    return DataLoader(cfg.train_data, cfg.model.vocab_size, cfg.seq_len, cfg.seed);
  } catch (const UserError& e) {
    fail_data_key("train_data", e, cfg);
  }
}

DataLoader training_data(Run& run) {
  DataLoader train = DataLoader::none(run.cfg.seq_len);
  agree_on_checks(run.world, [&] { train = training_data(run.cfg); });
  return train;
}

DataLoader validation_data(Run& run) {
  DataLoader val = DataLoader::none(run.cfg.seq_len);
  agree_on_checks(run.world, [&] { val = validation_data(run.cfg); });
  return val;
}

void check_data_files(const Config& cfg) {
  for (const auto& [key, pattern] : {std::pair{"train_data", cfg.train_data}, {"val_data", cfg.val_data}}) {
    if (pattern.empty()) continue;  // validate() refuses an empty train_data; no val_data: no validation
    try {
      stream_tokens(pattern);
    } catch (const UserError& e) {
      fail_data_key(key, e, cfg);
    }
  }
}

DataLoader validation_data(const Config& cfg) {
  if (cfg.val_data.empty()) {
    require(cfg.val_batches == 0, "val_data is empty but val_batches=" + std::to_string(cfg.val_batches) +
                                      ": give a validation shard, or set val_batches=0 to train without validation");
    return DataLoader::none(cfg.seq_len);
  }
  DataLoader val = [&] {
    try {
      return DataLoader(cfg.val_data, cfg.model.vocab_size, cfg.seq_len, cfg.seed);
    } catch (const UserError& e) {
      fail_data_key("val_data", e, cfg);
    }
  }();
  require_disjoint_splits(cfg.train_data, cfg.val_data);
  const int64_t wanted = int64_t(cfg.val_batches) * cfg.micro_batch_size;
  require(wanted <= val.num_windows(),
          "val_batches=" + std::to_string(cfg.val_batches) + " x micro_batch_size=" +
              std::to_string(cfg.micro_batch_size) + " = " + std::to_string(wanted) + " sequences, but val_data '" +
              cfg.val_data + "' holds " + std::to_string(val.num_windows()) + " windows of seq_len=" +
              std::to_string(cfg.seq_len) + " tokens: validation would count some twice; " +
              (val.num_windows() >= cfg.micro_batch_size
                   ? "use val_batches <= " + std::to_string(val.num_windows() / cfg.micro_batch_size)
                   : "not one micro-batch fits: give a longer val_data, " +
                         (val.num_windows() > 1 ? "lower micro_batch_size to " + std::to_string(val.num_windows()) +
                                                      " or less, "
                                                : std::string("lower micro_batch_size to 1, ")) +
                         "or set val_batches=0 (no validation)"));
  return val;
}

template <class A>
double validation_loss(GPT2<A>& model, const DataLoader& val, int batches, Communicator& dp,
                       const SequencePart* part) {
  const EvaluateBatch evaluate = [&](const int32_t* inputs, const int32_t* targets) {
    return double(model.evaluate(inputs, targets));
  };
  return validation_loss(evaluate, val, batches, model.batch(), dp, part);
}

double validation_loss(const EvaluateBatch& evaluate, const DataLoader& val, int batches, int batch_size,
                       Communicator& dp, const SequencePart* part) {
  const int B = batch_size, T = val.seq_len();
  const size_t n = size_t(B) * T;
  std::vector<int32_t> inputs(n), targets(n), local_in, local_tg;
  if (part) local_in.resize(size_t(B) * part->local_len(T)), local_tg.resize(local_in.size());
  double sum = 0;
  const int rounds = (batches + dp.size() - 1) / dp.size();
  for (int i = 0; i < rounds; ++i) {
    const int k = i * dp.size() + dp.rank();
    val.sequential_batch(k < batches ? k : 0, B, inputs.data(), targets.data());
    double loss = 0;
    if (part) {
      part->take(inputs.data(), local_in.data(), B, T);
      part->take(targets.data(), local_tg.data(), B, T);
      loss = evaluate(local_in.data(), local_tg.data());
      part->group->all_reduce(&loss, 1, DType::F64);
      loss /= part->group->size();  // every part has as many tokens
    } else {
      loss = evaluate(inputs.data(), targets.data());
    }
    if (k < batches) sum += loss;
  }
  dp.all_reduce(&sum, 1, DType::F64);
  return batches > 0 ? sum / batches : 0.0;
}

namespace {

// Writes a checkpoint of `state`: together (each rank its shard) or by the lead alone.
std::string write_checkpoint(Run& run, Communicator& dp, const RunCheckpoints& ckpt, const CheckpointState& state) {
  // The ranks wait here on rank 0's disk work, which grows with the model: their waits
  // are bounded by save_timeout_s, not by comm_timeout_s, which is sized for compute.
  const LongerTimeout world_waits(run.world, run.cfg.save_timeout_s), dp_waits(dp, run.cfg.save_timeout_s);
  // Test hook: GPT_TEST_SAVE_DELAY_S=N holds rank 0 N seconds before it writes, as a slow
  // disk would (tests/trainer/save_timeout.sh).
  if (const char* delay = std::getenv("GPT_TEST_SAVE_DELAY_S"); delay && run.lead())
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(delay)));
  std::string path;
  if (ckpt.before_write) ckpt.before_write();
  // Weights that are not numbers stop the run here, before the run directory is touched.
  // Rank-local buffers (ckpt.local) index no flat layout: their elements go unnamed.
  std::vector<CheckpointBuffer> held = ckpt.buffers;
  if (ckpt.local)
    for (CheckpointBuffer& b : held) b.begin = 0, b.end = ckpt.local->total();
  check_saveable(run.world, ckpt.local ? nullptr : &ckpt.layout, held, state.step);
  if (set_aside_before_first_save(run.cfg, run.lead(), run.later_checkpoints_set_aside)) run.world.barrier();
  if (ckpt.local) {
    std::vector<LocalBuffer> local;
    for (const CheckpointBuffer& b : ckpt.buffers) local.push_back({b.kind, b.data});
    path = save_checkpoint_local(run.world, run.cfg.run_dir, run.cfg, *ckpt.local, state, local);
  } else if (ckpt.sharded) {
    path = save_checkpoint_sharded(dp, run.cfg.run_dir, run.cfg, ckpt.layout, state, ckpt.buffers);
  } else {  // each rank holds the whole model: rank 0 writes it
    path = save_checkpoint_by_lead(run.world, run.cfg.run_dir, run.cfg, ckpt.layout, state, ckpt.buffers);
  }
  if (run.lead()) prune_checkpoints(run.cfg.run_dir, run.cfg.keep_checkpoints);
  run.world.barrier();  // no rank reads or writes the run directory before the checkpoint is complete
  return path;
}

// How many ranks a stop signal has reached (common/stop_request.h): each adds 1 if it
// has, so every rank sees the same count after the same step. One double a step.
int ranks_stopping(Communicator& world) {
  double received = stop_signal() != 0 ? 1 : 0;
  world.all_reduce(&received, 1, DType::F64);
  return int(received);
}

// What stopped the run, for the lead's line: its own signal, and on how many ranks.
std::string stop_cause(int ranks_stopping, int ranks) {
  const std::string where = std::to_string(ranks_stopping) + " of " + std::to_string(ranks) + " ranks";
  return stop_signal() != 0 ? stop_signal_name(stop_signal()) + " (on " + where + ")" : "a stop signal on " + where;
}

// The multiple-choice eval of the whole model, which every rank has received.
template <class A>
void log_choices(Run& run, MetricsLog& log, int64_t step, const WholeWeights<A>& whole) {
  const ChoicesTally tally = run.choices->score(whole.data(), run.cfg.model, run.device, run.precision, &run.world);
  if (run.lead()) log.choices(step, tally, run.choices->file());
}

bool scores_choices(const Run& run) { return run.choices && run.choices->enabled(); }

}  // namespace

void log_step(const Config& cfg, MetricsLog& log, bool lead, double flops_per_token, std::optional<double> peak_flops,
              int64_t step, double loss, double lr, double grad_norm, double ms, const MemoryLedger& mem) {
  StepMetrics m;
  m.step = step, m.steps = cfg.steps, m.loss = loss, m.lr = lr, m.grad_norm = grad_norm, m.ms = ms;
  m.tokens_per_s = double(cfg.tokens_per_step()) / (ms / 1000.0);
  m.mfu = model_flops_utilisation(m.tokens_per_s, flops_per_token, peak_flops);
  if (lead) log.train_step(m, mem, step % cfg.log_every == 0 || step == cfg.steps);
  if (!std::isfinite(loss))
    fail("the loss is " + std::to_string(loss) + " at step " + std::to_string(step) + " (lower lr?)");
}

void log_validation(MetricsLog& log, bool lead, int64_t step, double val_loss) {
  if (lead) log.validation(step, val_loss);
  require_finite_result(val_loss, "step " + std::to_string(step) + ": the validation loss",
                        "the weights have diverged (lower lr?): the run stops, and no checkpoint is written of them");
}

template <class A>
bool after_step(Run& run, const Validation& validate, Communicator& dp, MetricsLog& log, const RunCheckpoints& ckpt,
                const CheckpointState& state, const GatherWhole<A>& whole) {
  const Config& cfg = run.cfg;
  if (state.step >= cfg.steps) return false;  // the end of the run has its own
  // A stop signal on any rank (common/stop_request.h): this step is kept, and the run ends.
  const auto stop = [&](int stopping, const std::string& path) {
    if (run.lead()) {
      const std::string cause = stop_cause(stopping, run.world.size());
      std::printf("stopped after step %lld by %s: checkpoint %s; --set resume=latest continues the run\n",
                  static_cast<long long>(state.step), cause.c_str(), path.c_str());
      std::fflush(stdout);  // said before mpirun's end of the job can cut it off
      log.stopped(state.step, stop_signal() != 0 ? stop_signal_name(stop_signal()) : cause, path);
    }
    run.stopped = true;
    return true;
  };
  if (const int stopping = ranks_stopping(run.world); stopping > 0)
    return stop(stopping, write_checkpoint(run, dp, ckpt, state));
  const bool evaluates = cfg.val_every > 0 && state.step % cfg.val_every == 0;
  if (evaluates) {
    if (cfg.val_batches > 0) {
      log_validation(log, run.lead(), state.step, validate());
    }
    if (scores_choices(run)) {
      const MemScope eval(MemKind::Eval);  // the gathered copy and the scorer: freed after it
      log_choices(run, log, state.step, whole(WholeOn::EveryRank));
    }
  }
  // Decided by the config alone, the same on every rank (the path is the lead's only).
  const bool saves = cfg.checkpoint_every > 0 && state.step % cfg.checkpoint_every == 0;
  const std::string saved = saves ? write_checkpoint(run, dp, ckpt, state) : std::string();
  // A signal during the evaluation or the save (either may take long): the run stops on
  // this step, saved once, rather than train another and save that within the grace period.
  if (evaluates || saves)
    if (const int stopping = ranks_stopping(run.world); stopping > 0)
      return stop(stopping, saves ? saved : write_checkpoint(run, dp, ckpt, state));
  return false;
}

template <class A>
bool after_step(Run& run, GPT2<A>& model, const DataLoader& val, Communicator& dp, MetricsLog& log,
                const RunCheckpoints& ckpt, const CheckpointState& state, const GatherWhole<A>& whole) {
  const Validation validate = [&] { return validation_loss(model, val, run.cfg.val_batches, dp, run.part); };
  return after_step(run, validate, dp, log, ckpt, state, whole);
}

template <class A>
void end_of_run(Run& run, const Validation& validate, Communicator& dp, MetricsLog& log, const RunCheckpoints& ckpt,
                CheckpointState& state, const GatherWhole<A>& whole, int sample_len) {
  const Config& cfg = run.cfg;
  if (run.stopped) {  // after_step has checkpointed the last step: no evaluation, no sample
    Trace::global().write();
    run.world.barrier();
    return;
  }
  // A stop signal after the last step: the training is done, and its checkpoint is still
  // written; the evaluation and the sample, which it would wait for, are not run.
  const bool cut_short = ranks_stopping(run.world) > 0;
  if (cut_short && run.lead())
    std::printf("a stop signal came after the last step: the end-of-run validation, eval and sample are skipped\n");
  const bool scores = scores_choices(run) && !cut_short, samples = cfg.sample_tokens > 0 && !cut_short;
  if (cfg.val_batches > 0 && !cut_short) {
    log_validation(log, run.lead(), state.step, validate());
  }
  // One gather serves the eval (every rank) and the sample (the lead, which keeps it).
  WholeWeights<A> weights;
  {
    const MemScope eval(MemKind::Eval);  // counted apart from the training's memory
    if (scores || samples) weights = whole(scores ? WholeOn::EveryRank : WholeOn::Lead);
    if (scores) log_choices(run, log, state.step, weights);
  }
  if (!run.lead()) weights = WholeWeights<A>();
  if (saves_at_end(cfg, state)) {
    const std::string path = write_checkpoint(run, dp, ckpt, state);
    if (run.lead()) std::printf("checkpoint: %s\n", path.c_str());
  }
  // The lead samples alone, reporting its progress to the others (LeadWork): they wait
  // as long as it samples, and a lead that stops reporting for the longer of
  // save_timeout_s and comm_timeout_s is named as hung.
  const LongerTimeout lead_waits(run.world, cfg.save_timeout_s);
  if (samples) {
    LeadWork sample(run.world, 0);
    if (run.lead()) {
      const MemScope eval(MemKind::Eval);
      CachedDecoder<A> sampler(cfg.model, sample_window(cfg, sample_len), run.device, run.precision);
      sampler.model().copy_params(weights.data());  // compute weights already: copied as they are
      // Test hook: GPT_TEST_SAMPLE_TOKEN_DELAY_S=N holds the lead N seconds a token, as a
      // large model's sample would take (tests/trainer/save_timeout.sh).
      const char* delay = std::getenv("GPT_TEST_SAMPLE_TOKEN_DELAY_S");
      const Sample drawn = sample_text(sampler, cfg, state.sample_counter, [&] {
        if (delay) std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(delay)));
        sample.progress();
        return stop_signal() == 0;  // a stop signal to the lead ends the sample where it is
      });
      print_sample(stdout, cfg, drawn.text, drawn.cut_short);
      log.sample(state.step, drawn.text, drawn.log_prob, drawn.tokens, drawn.cut_short);
      sample.done();
    } else {
      sample.wait_for_lead();
    }
  }
  Trace::global().write();
  // The ranks leave together. MPI_Finalize, next, waits for every rank with no timeout,
  // so a rank still busy (writing its trace, say) or hung would hang the others there for
  // good; this barrier waits for it instead, bounded as above, and names it.
  run.world.barrier();
}

template <class A>
void end_of_run(Run& run, GPT2<A>& model, const DataLoader& val, Communicator& dp, MetricsLog& log,
                const RunCheckpoints& ckpt, CheckpointState& state, const GatherWhole<A>& whole) {
  const Validation validate = [&] { return validation_loss(model, val, run.cfg.val_batches, dp, run.part); };
  // Under a context split the model holds part of each sequence; the sampler's window
  // is the whole sequence.
  end_of_run(run, validate, dp, log, ckpt, state, whole, run.part ? val.seq_len() : model.seq_len());
}

// The model overloads for the storage types the stages train with.
#define GPT_DRIVER_INSTANTIATE(A)                                                                              \
  template double validation_loss<A>(GPT2<A>&, const DataLoader&, int, Communicator&, const SequencePart*);   \
  template bool after_step<A>(Run&, const Validation&, Communicator&, MetricsLog&, const RunCheckpoints&,       \
                              const CheckpointState&, const GatherWhole<A>&);                                   \
  template bool after_step<A>(Run&, GPT2<A>&, const DataLoader&, Communicator&, MetricsLog&,                   \
                              const RunCheckpoints&, const CheckpointState&, const GatherWhole<A>&);           \
  template void end_of_run<A>(Run&, GPT2<A>&, const DataLoader&, Communicator&, MetricsLog&,                   \
                              const RunCheckpoints&, CheckpointState&, const GatherWhole<A>&);                 \
  template void end_of_run<A>(Run&, const Validation&, Communicator&, MetricsLog&, const RunCheckpoints&,       \
                              CheckpointState&, const GatherWhole<A>&, int);
GPT_DRIVER_INSTANTIATE(float)
GPT_DRIVER_INSTANTIATE(bf16)

}  // namespace gpt
