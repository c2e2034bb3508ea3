/// @file
/// The multi-rank driver every stage after 01 shares: what is the same in each
/// train.cpp, written once, so that a stage's driver holds its loop and its technique
/// and `diff -u` of two neighbouring drivers shows the technique.
///
/// ```
///   stage_main(argc, argv, spec, train)
///     parse the config (--config, --set, --help), pick the device, join the job,
///     build the process mesh dp x pp x cp x tp from the config keys, refuse by name an
///     axis the stage does not implement, start each rank's trace (trace_file), then run
///     train(run) on every rank. The checks before the run (command line, configuration,
///     the stage's own limits, the data files' headers) are compared across the ranks: a
///     refusal they share is said once, and every rank exits 2 without an abort. After
///     that an error on one rank ends them all (bad input: exit 2; a bug: exit 1).
///   log_step(...)       a finished step's metrics line; a loss that is not finite stops the run
///   log_validation(...) the same for a validation loss
///   after_step(...)     the validation loss (and the multiple-choice eval) and the
///                       checkpoint every N steps; true when a stop signal ends the run
///                       here, after a checkpoint (common/stop_request.h: exit 3)
///   end_of_run(...)     the last validation loss and eval, the final checkpoint, the sample
///                       (which the lead runs alone, reporting to the others: lead_work.h)
/// ```
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/choices_in_training.h"
#include "common/comm.h"
#include "common/config.h"
#include "common/data.h"
#include "common/device.h"
#include "common/gpt2.h"
#include "common/mesh.h"
#include "common/metrics.h"
#include "common/mfu.h"
#include "common/precision.h"
#include "common/rank_layout.h"
#include "common/whole_model.h"

namespace gpt {

/// What a stage implements beyond data parallelism, and where it runs.
struct StageSpec {
  const char* name;  ///< "03_zero1": named in messages
  /// Axes implemented (dp always is); tp: tensor parallelism, sequence parallelism included.
  bool tp = false, pp = false, cp = false;
  /// @var pp
  /// Pipeline parallelism implemented (pp may exceed 1).
  /// @var cp
  /// Context parallelism implemented (cp may exceed 1).
  bool virtual_stages = false;              ///< interleaved pipeline chunks
  bool zero_key = false;                    ///< reads `zero` (the ZeRO stage over dp)
  bool zero3 = false;                       ///< ZeRO-3 by construction (stage 05): reads `zero3_prefetch`
  bool schedule_key = false;                ///< reads `schedule` (the pipeline schedule)
  bool activation_checkpointing_key = false;  ///< reads `activation_checkpointing`
  bool allreduce_key = false;               ///< reads `allreduce` (stage 02's ring or the backend's)
  /// The stage's own limits on a configuration on a mesh (its technique's: a tp that
  /// divides the heads, a layer at least for every pipeline chunk), which stage_main checks with
  /// the shared ones before the run starts, the ranks comparing their refusals; none if null.
  void (*checks)(const Config& cfg, const MeshShape& mesh) = nullptr;
};

/// The mesh the config asks for on `ranks` ranks: tp, pp, cp as given, dp as given or
/// (dp = 0) the ranks left; dp x pp x cp x tp must equal ranks, or a UserError names the
/// keys, their values and the rank count.
MeshShape mesh_shape_for(const Config& cfg, int ranks);

/// A note when a rank's OpenMP threads outnumber the CPUs they can run on, "" otherwise:
/// `threads` per rank, `ranks_here` ranks on this machine, `cores` the machine's, and
/// `allowed` the CPUs this process may run on (its affinity mask: mpirun binds each rank
/// to one core unless told --bind-to none, and taskset narrows it too). Threads beyond
/// the CPUs take turns, and every parallel loop waits for its slowest thread: a step
/// several times slower, with nothing else to show why. The note names the threads to set:
/// as many as the rank's CPUs and its share of the cores allow, at least 1; at one thread
/// a rank, where the ranks alone outnumber the cores, it names the most ranks instead.
std::string thread_notes(int threads, int ranks_here, int cores, int allowed);
/// thread_notes for this process: omp_get_max_threads(), the launcher's ranks on this
/// machine, std::thread::hardware_concurrency() and sched_getaffinity's count.
std::string thread_notes_here();

/// A UserError naming the first axis (tp, pp, cp, virtual_stages) the config sets
/// beyond 1 that the stage does not implement, or sequence_parallel without tp, or a
/// `zero`, a `schedule`, a `cp_split`, an `allreduce`, an `activation_checkpointing` or
/// a `zero3_prefetch=false` the stage does not read.
void require_axes(const Config& cfg, const StageSpec& spec);

/// The part of each sequence a rank runs: the whole by default; context parallelism
/// takes some chunks (stages/10_context_parallel/context_split.h). `group` holds the
/// ranks that share a sequence: a loss over the part is averaged over them.
struct SequencePart {
  virtual ~SequencePart() = default;
  /// Copies this rank's tokens of B whole sequences of T tokens into `part` (B rows of
  /// local_len(T)).
  virtual void take(const int32_t* whole, int32_t* part, int B, int T) const = 0;
  virtual int local_len(int T) const = 0;  ///< tokens this rank runs of each sequence of T tokens
  Communicator* group = nullptr;  ///< the ranks sharing a sequence (the cp group); set by the stage, not owned
};

/// What a rank's training starts from.
struct Run {
  Config& cfg;            ///< the parsed configuration, the same on every rank
  Communicator& world;    ///< every rank of the job
  Mesh& mesh;             ///< the dp x pp x cp x tp process mesh over world, with a communicator per axis
  Device device;          ///< where this rank trains: device=auto resolved
  Precision precision;    ///< FP32 or BF16 (stage_main refuses FP64)
  bool lead() const { return world.rank() == 0; }  ///< logs, prunes checkpoints, samples
  const SequencePart* part = nullptr;  ///< context parallelism: the chunks this rank runs
  /// The summed peak FLOP/s of the job's GPUs for the matmuls the stage runs (bf16 for a
  /// stage with bf16 storage in bf16 mode, else fp32), each GPU once (common/mfu.h);
  /// empty on the CPU.
  std::optional<double> peak_flops;
  double flops_per_token = 0;  ///< training FLOPs per token of the whole model (common/mfu.h)
  /// The multiple-choice eval of cfg.eval_choices, this rank's share (common/choices_in_training.h).
  const ChoicesInTraining* choices = nullptr;
  /// Whether the first checkpoint has set another run's later ones aside (set_aside_before_first_save).
  bool later_checkpoints_set_aside = false;
  /// A stop signal ended the run after a step and its checkpoint (after_step); stage_main
  /// then exits with kStoppedExit.
  bool stopped = false;
};

/// The entry point of a multi-rank stage (see the top of this file). Returns the exit
/// status for main().
using TrainFn = int (*)(Run& run);
/// Runs a stage as described at the top of this file and returns main()'s exit status:
/// train's result, 0 after --help, 2 for a UserError, 1 for any other error, and
/// kStoppedExit (3) for a run a stop signal ended (common/stop_request.h). On more than
/// one rank, the checks of the command line, the configuration and the data files' headers
/// are compared across the ranks first: a refusal they share is printed once, and every
/// rank returns 2 without an abort. An error after that aborts every rank with its status.
int stage_main(int argc, char** argv, const StageSpec& spec, TrainFn train);

/// The validation set of a run, in windows of cfg.seq_len tokens: cfg.val_data loaded,
/// or nothing when val_data is empty, which only a run with val_batches = 0 may leave it.
/// A UserError names val_batches when its val_batches x micro_batch_size sequences do not
/// fit in the data's distinct windows (validation would count some twice), and names
/// val_data and train_data when the two share a file.
DataLoader validation_data(const Config& cfg);
/// The training set of a run: cfg.train_data in windows of cfg.seq_len tokens (whole
/// sequences, which context parallelism then splits); a UserError names train_data.
DataLoader training_data(const Config& cfg);
/// The two for the ranks of a job: collective over run.world. Every rank maps the same
/// shards and checks the same token ids, so a refusal they all make (a token beyond
/// vocab_size, too few validation windows) is said once, as stage_main's checks are, and
/// the job ends with status 2 and no abort.
DataLoader training_data(Run& run);
/// validation_data(run.cfg) for the ranks of a job, as training_data(Run&) is.
DataLoader validation_data(Run& run);
/// The train_data and val_data shards' names and headers, checked as a DataLoader checks
/// them before it reads a token (stream_tokens: cheap for any corpus), each error with the
/// key that named the file: what stage_main's ranks compare before a run starts.
void check_data_files(const Config& cfg);
/// A data file's error `e`, with `key` (train_data, val_data) that named it, thrown again as
/// a UserError; for val_data in a run that validates nothing, how to do without it.
[[noreturn]] void fail_data_key(const char* key, const UserError& e, const Config& cfg);

/// The mean loss of one batch's tokens and targets (host memory, batch_size rows of the
/// tokens this rank runs of each sequence), however a stage evaluates it: a model's
/// evaluate(), or a pipeline's forward through every stage.
using EvaluateBatch = std::function<double(const int32_t* inputs, const int32_t* targets)>;

/// Mean loss over `batches` fixed validation batches of batch_size sequences; the ranks of
/// `dp` share them (rank r evaluates batches r, r + dp, ...; a rank past the end repeats
/// batch 0 and ignores it, because a forward may communicate) and their sums are added.
/// With `part`, each rank evaluates its part of the sequences and the part's mean loss
/// is averaged over part->group.
double validation_loss(const EvaluateBatch& evaluate, const DataLoader& val, int batches, int batch_size,
                       Communicator& dp, const SequencePart* part = nullptr);
/// The same for a model on this rank: each batch through model.evaluate().
template <class A>
double validation_loss(GPT2<A>& model, const DataLoader& val, int batches, Communicator& dp,
                       const SequencePart* part = nullptr);

/// Checkpoints of a run: the tensors each rank holds and whether the ranks write one
/// checkpoint together (each its shard) or the lead rank writes it alone (its buffers
/// hold everything).
struct RunCheckpoints {
  const ParamLayout& layout;  ///< the tensors the checkpoint records (unused when `local` is set)
  std::vector<CheckpointBuffer> buffers;  ///< this rank's host buffers, one per kind (param, adam_m, adam_v)
  bool sharded = false;  ///< every rank of dp writes its slice together; false: the lead rank writes alone
  /// Rank-local buffers (tensor parallelism and later): every rank of the world writes
  /// the counted elements of `local`, whose buffers are `buffers`' data (begin and end
  /// unused), through the flat shards (layout_exchange.h); `layout` is then not read
  /// (the stages pass their own, local or global: only `local` decides what is written).
  const RankLayout* local = nullptr;
  /// Called on every rank before a checkpoint is written (a rank holding several model
  /// chunks packs them into `buffers` there).
  std::function<void()> before_write = {};
};

/// Logs step `step` (the steps done, 1-based), which took `ms` of wall time: on the lead
/// rank, its line in the metrics file (tokens per second from `ms`, and the MFU of
/// `flops_per_token` against `peak_flops` where a peak is known), printed every log_every
/// steps and at the last. Then, on every rank, a UserError naming the step if the loss is
/// not finite: a diverged run stops at once, before it checkpoints.
void log_step(const Config& cfg, MetricsLog& log, bool lead, double flops_per_token, std::optional<double> peak_flops,
              int64_t step, double loss, double lr, double grad_norm, double ms, const MemoryLedger& mem);
/// Logs the validation loss of step `step` (the lead rank's line), then, on every rank (the
/// loss is the same on each), a UserError naming the step if it is not finite: weights
/// that give NaN have diverged, and the run stops before it checkpoints them.
void log_validation(MetricsLog& log, bool lead, int64_t step, double val_loss);
/// The same for a rank of a multi-rank run: the lead rank, the FLOPs and the peak are run's.
inline void log_step(const Run& run, MetricsLog& log, int64_t step, double loss, double lr, double grad_norm,
                     double ms, const MemoryLedger& mem) {
  log_step(run.cfg, log, run.lead(), run.flops_per_token, run.peak_flops, step, loss, lr, grad_norm, ms, mem);
}

/// How a stage computes its validation loss over cfg.val_batches batches, called on every
/// rank (it may communicate); the lead rank's result is logged. The model-taking
/// overloads below use validation_loss; a pipeline runs its own through its stages.
using Validation = std::function<double()>;

/// After step `state.step` finished: every val_every steps the validation loss and the
/// multiple-choice eval (run.choices, with the whole model from `whole` on every rank),
/// and a checkpoint every checkpoint_every steps (not after the last step: end_of_run
/// saves that one, saves_at_end). Returns true when the run is to stop here: a stop signal reached a rank
/// (common/stop_request.h; the ranks agree, a sum over the world), and a checkpoint of
/// this step is written instead of the validation; run.stopped is then set, and the
/// stage leaves its loop for end_of_run, which then only lets the ranks leave together.
template <class A>
[[nodiscard]] bool after_step(Run& run, const Validation& validate, Communicator& dp, MetricsLog& log,
                              const RunCheckpoints& ckpt, const CheckpointState& state, const GatherWhole<A>& whole);
/// The same, with validation_loss of `model` over cfg.val_batches batches of `val`,
/// shared by the ranks of dp, each evaluating its run.part of the sequences if set.
template <class A>
[[nodiscard]] bool after_step(Run& run, GPT2<A>& model, const DataLoader& val, Communicator& dp, MetricsLog& log,
                              const RunCheckpoints& ckpt, const CheckpointState& state, const GatherWhole<A>& whole);

/// After the last step: the validation loss, the multiple-choice eval, the final
/// checkpoint and, on the lead rank, a sample from the whole model `whole` assembles
/// (stored as A: float, or bf16 for a stage with bf16 storage, whose sampler is then a
/// GPT2<bf16> as stage 01's) with a context of `sample_len` tokens.
template <class A>
void end_of_run(Run& run, const Validation& validate, Communicator& dp, MetricsLog& log, const RunCheckpoints& ckpt,
                CheckpointState& state, const GatherWhole<A>& whole, int sample_len);
/// The same, validating as after_step's model overload does and sampling with a context
/// of a whole sequence: val's seq_len where a SequencePart splits the sequences, else
/// model.seq_len().
template <class A>
void end_of_run(Run& run, GPT2<A>& model, const DataLoader& val, Communicator& dp, MetricsLog& log,
                const RunCheckpoints& ckpt, CheckpointState& state, const GatherWhole<A>& whole);

}  // namespace gpt
