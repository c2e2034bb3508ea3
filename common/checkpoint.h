/// @file
/// Layout-independent checkpoints (docs/checkpoints.md).
///
/// ```
/// A checkpoint is a directory `<run_dir>/step_00000100/` holding
///   manifest.json  format version, config (every key), model shape, step, the layout
///                  it was written with, data position, RNG state, and a tensor table:
///                  for each tensor its name ("param/h.0.ln_1.weight", "adam_m/...",
///                  "adam_v/..."), full shape, dtype, file, byte offset and checksum;
///   one .bin file per kind (param.bin, adam_m.bin, adam_v.bin): every tensor stored
///                  whole, by name, in the layout's order, little-endian, in the type
///                  the run keeps it: fp32, or fp64 in the fp64 ground-truth runs.
/// ```
/// A rank holding elements [begin, end) of the flat parameter buffer writes and reads
/// only that slice, at its offset; so any layout resumes any checkpoint.
/// The directory is written under a temporary name (step_00000100.tmp) and renamed
/// once complete, so a crash never leaves a half checkpoint that looks complete.
/// Loading verifies the format, the model shape, every file's size and every tensor's
/// checksum; any mismatch is a UserError naming the file, tensor and reason. A tensor
/// loads into a buffer of either type: fp32 into doubles is widened exactly, fp64 into
/// floats is rounded to nearest (a value beyond fp32's range is refused).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/device_array.h"
#include "common/gpt2_layout.h"

namespace gpt {

class Communicator;

/// One kind of tensor a rank holds: elements [begin, end) of the flat layout buffer, as
/// floats (data) or as doubles (data64): exactly one is set where the slice is not empty
/// (an empty slice with neither counts as floats). A save writes the file in the buffer's
/// type; a load converts from the file's.
struct CheckpointBuffer {
  std::string kind;  ///< "param" (the master weights), "adam_m", "adam_v"
  float* data;  ///< host memory holding the slice, data[0] being element begin; not owned
  /// The slice's first element, an index into the flat layout buffer.
  int64_t begin, end;  ///< one past the slice's last element
  double* data64 = nullptr;  ///< instead of data: the slice as doubles (the fp64 runs), not owned

  bool fp64() const { return data64 != nullptr; }  ///< whether the slice is held as doubles
  int64_t element_bytes() const { return fp64() ? 8 : 4; }  ///< in memory and in the file
  const char* dtype() const { return fp64() ? "fp64" : "fp32"; }  ///< the manifest's name of the type
  /// The bytes of flat element i (begin <= i <= end).
  char* bytes_at(int64_t i) const {
    return fp64() ? reinterpret_cast<char*>(data64 + (i - begin)) : reinterpret_cast<char*>(data + (i - begin));
  }
};

/// Checkpoints read and write host memory. A CheckpointMirror hands out the buffers of
/// device arrays: on the CPU the arrays themselves; on the GPU host copies, refreshed by
/// to_host() before a save and pushed back by to_device() after a load or an init.
/// Arrays of doubles (the fp64 ground-truth runs) are handed out as doubles: their
/// checkpoints hold fp64, so that a resumed fp64 run continues bit for bit.
class CheckpointMirror {
 public:
  /// One array to mirror, under one kind: exactly one of array and array64 is set.
  struct Entry {
    std::string kind;  ///< as CheckpointBuffer::kind
    DeviceArray<float>* array;  ///< the fp32 array (not owned: it must outlive the mirror), or null
    DeviceArray<double>* array64 = nullptr;  ///< instead of array
    /// The part of the array that is mirrored: elements [offset, offset + count) (a
    /// rank's shard inside the model's whole weights); count npos means to the end.
    size_t offset = 0;
    size_t count = size_t(-1);  ///< elements mirrored; size_t(-1) (npos): to the end of the array
    /// The elements [offset, offset + count) of a float array.
    static Entry slice(std::string kind, DeviceArray<float>* array, size_t offset, size_t count) {
      return {std::move(kind), array, nullptr, offset, count};
    }
  };
  /// Mirrors `entries`, whose arrays must outlive it. begin is the flat-buffer index of
  /// every entry's first mirrored element: buffers() reports each as [begin, begin + count).
  /// Host copies are allocated for device arrays (zeros until to_host()). An entry with
  /// no array, or both, or an offset past its array's end is an InternalError.
  explicit CheckpointMirror(std::vector<Entry> entries, int64_t begin = 0);
  /// Host memory holding `kind`, whose array holds T (float or double): the array itself
  /// on the CPU, its host copy for a device array. Another T is an InternalError.
  template <class T = float>
  T* host(const std::string& kind);
  std::vector<CheckpointBuffer> buffers();  ///< every entry, elements [begin, begin+size)
  void to_host();    ///< arrays -> host copies (a no-op for arrays on the CPU)
  void to_device();  ///< host copies -> arrays (a no-op for arrays on the CPU)

 private:
  std::vector<Entry> entries_;
  std::vector<std::vector<float>> mirrors_;  ///< host copies of float device arrays; empty otherwise
  std::vector<std::vector<double>> mirrors64_;  ///< host copies of double device arrays; empty otherwise
  int64_t begin_;
};

/// What a checkpoint records besides its tensors: where the run resumes.
struct CheckpointState {
  int64_t step = 0;              ///< optimizer steps completed
  uint64_t sample_counter = 0;   ///< counter of the sampling RNG
  /// The layout that wrote the checkpoint, a JSON object such as the default (the
  /// manifest records it, and a load reads it back; resuming does not depend on it). It
  /// must be valid JSON, or the save fails.
  std::string layout_json = "{\"dp\":1,\"tp\":1,\"pp\":1,\"cp\":1}";
  /// The checkpoint this run resumed ("" for a fresh run); set by the loads, not saved
  /// (see rewrites_resumed_checkpoint).
  std::string resumed_from;
  int64_t resumed_step = 0;  ///< the step of resumed_from (0 for a fresh run); not saved
  /// The data position of resumed_from: the training sequences its steps consumed (0 for
  /// a fresh run; -1 for a checkpoint that records neither it nor its batch_size, whose
  /// steps are then taken to have read this run's batch_size each). Set by the loads.
  int64_t resumed_sequences = 0;
  /// Whether this run has trained a step since it started.
  bool trained() const { return step > resumed_step; }
  /// The data position after `step`: the training sequences steps 1..step consumed,
  /// those of the resumed checkpoint and then `batch_size` a step. It is what a save
  /// records, and, during step + 1, the index of that step's first sequence
  /// (DataLoader::batch), so a resume may change batch_size and read on where the
  /// checkpoint stopped.
  int64_t sequences(int batch_size) const {
    const int64_t at_resume = resumed_sequences >= 0 ? resumed_sequences : resumed_step * batch_size;
    return at_resume + (step - resumed_step) * batch_size;
  }
};

/// Whether the checkpoint a run would write now is the one it resumed, unchanged: it has
/// trained no step (steps=0 to evaluate and sample, or a finished run resumed with its
/// own steps) since resuming a checkpoint of its own run_dir. The end of such a run
/// writes nothing: saving the same step again would prune the directory's older
/// checkpoints for nothing. (A fresh run with steps=0 writes step 0, its initial
/// weights; a resume from another directory with steps=0 copies the checkpoint there.)
bool rewrites_resumed_checkpoint(const std::string& run_dir, const CheckpointState& state);

/// Whether the end of a run writes a checkpoint of its last step: with checkpoint_at_end,
/// and also when checkpoint_every falls on that step and this run trained it (the periodic
/// saves stop before the last step, whose save is this one, made once), but never the
/// checkpoint the run resumed, unchanged (rewrites_resumed_checkpoint).
bool saves_at_end(const Config& cfg, const CheckpointState& state);

/// Weights or moments that are not numbers, refused before a save touches the run
/// directory (a diverged run must neither publish them nor set aside or prune what is
/// there): a UserError naming `step`, the kind and the element, and the tensor when
/// `layout` (optional) is the one the buffers' begin and end index. The saves check too;
/// a run calls this first, before its first save sets another run's checkpoints aside.
void check_saveable(const ParamLayout* layout, const std::vector<CheckpointBuffer>& buffers, int64_t step);
/// The same on every rank of `comm`: collective, and every rank throws the first failing
/// rank's error ("rank R: ...").
void check_saveable(Communicator& comm, const ParamLayout* layout, const std::vector<CheckpointBuffer>& buffers,
                    int64_t step);

/// Writes a complete checkpoint of `step` under run_dir and returns its path.
/// One writer: the buffers should hold the whole layout (a tensor outside them gets a
/// null checksum and cannot be loaded). For shards spread over ranks, use
/// save_checkpoint_sharded.
std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const ParamLayout& layout, const CheckpointState& state,
                            const std::vector<CheckpointBuffer>& buffers);

/// save_checkpoint by rank 0 of `comm` alone, whose ranks all hold the whole layout (data
/// parallelism's replicas), as one collective: rank 0's error (a disk full) is thrown on
/// every rank ("rank 0: ..."), so none waits for it in the next collective. Returns the
/// path on rank 0, "" elsewhere.
std::string save_checkpoint_by_lead(Communicator& comm, const std::string& run_dir, const Config& cfg,
                                    const ParamLayout& layout, const CheckpointState& state,
                                    const std::vector<CheckpointBuffer>& buffers);

/// The same checkpoint, written together by every rank of `comm` (ZeRO: each rank
/// holds only its shard). Collective: every rank calls it, with the same run_dir, step
/// and kinds (in the same order), each with its own slice; for each kind the ranks'
/// slices must tile [0, layout.total()) exactly (uneven is fine; a slice may cut a
/// tensor). Rank 0 creates the files, every rank writes its slice in place, then rank 0
/// reads the files back to checksum every tensor, writes the manifest (cfg and state
/// are taken from rank 0) and renames the directory into place. The files and the
/// manifest are the ones save_checkpoint would write for the union of the slices.
/// Returns the checkpoint's path on every rank. An error on any rank (a disk full, a
/// bad slice) is thrown on every rank with the same message ("rank R: ..."), so no rank
/// is left waiting in a collective. run_dir must be on a file system all ranks see,
/// and the communicator must accept host buffers (it exchanges a few small host
/// values): every backend does, NCCL through its MPI communicator.
std::string save_checkpoint_sharded(Communicator& comm, const std::string& run_dir,
                                    const Config& cfg, const ParamLayout& layout,
                                    const CheckpointState& state,
                                    const std::vector<CheckpointBuffer>& buffers);

/// Reads checkpoint directory `path` into the buffers (each its own slice) and returns
/// its state. The model shape in the manifest must equal layout.model().
CheckpointState load_checkpoint(const std::string& path, const ParamLayout& layout,
                                const std::vector<CheckpointBuffer>& buffers);

/// The model shape checkpoint `path` was written for (its manifest's "model"): what a
/// tool needs to build the layout before it loads the tensors. Throws a UserError naming
/// the manifest when it is missing, malformed or has no such shape.
ModelConfig checkpoint_model(const std::string& path);

/// The config the run that wrote checkpoint `path` recorded (its manifest's "config": every
/// key, as config_to_json writes them), as JSON text; "" for a checkpoint that records
/// none (written before manifests did). A UserError names a missing or malformed manifest.
std::string checkpoint_config_json(const std::string& path);

/// load_checkpoint on every rank of `comm`, each reading its own slices (ZeRO's shards,
/// a pipeline stage's part), as one collective: an error on any rank (a tensor of its
/// slice fails its checksum, a file it needs is missing) is thrown on every rank with the
/// same message ("rank R: ..."), so that no rank goes on into the next collective to
/// wait for one that gave up. With one rank it is load_checkpoint.
CheckpointState load_checkpoint_sharded(Communicator& comm, const std::string& path, const ParamLayout& layout,
                                        const std::vector<CheckpointBuffer>& buffers);

/// The newest complete checkpoint in run_dir ("" when there is none). A step_N.old left
/// by a save killed while it replaced step N counts when step_N is missing.
std::string latest_checkpoint(const std::string& run_dir);

/// What a tool given `path` reads: a checkpoint directory as it is; a run directory (a
/// directory with no manifest of its own that holds checkpoints) by its latest checkpoint.
/// A directory that holds neither (not named step_N) is a UserError saying so; anything
/// else is returned as given, for the load to say what is wrong with it.
std::string checkpoint_or_latest(const std::string& path);

/// The checkpoint a run resumes, from the config's `resume`: "" (start fresh) stays "",
/// "latest" becomes the newest checkpoint in run_dir ("" when there is none yet: a first
/// run starts fresh), anything else is a path, returned as given (loading checks the
/// rest). Throws a UserError when `steps` (> 0) is below the checkpoint's step: steps
/// counts from the start of the run; steps=0 trains nothing.
std::string resolve_resume(const Config& cfg);

/// A run directory holds one run's checkpoints. Entries of run_dir named step_N (or
/// step_N.old) at or past the step this run starts from, checkpoints or not, belong to
/// another run, except the checkpoint it resumes: left there, a save would replace the
/// one of its step, pruning (which keeps the newest steps) would delete this run's saves
/// first and a later resume=latest would continue the other run. So they move, whole and
/// unchanged (a rename: nothing is lost or copied), into
/// run_dir/set_aside_YYYYmmdd-HHMMSS/, the time in UTC.
///
/// Call before every checkpoint a run writes, on every process of the run: the first
/// time (`done` false; it becomes true), the process holding the run directory's lock
/// (`lead`) sets the later checkpoints aside and prints what moved. Not at the start:
/// a run refused at start (a missing shard, a corrupt resume checkpoint) or stopped
/// before its first save leaves run_dir as it found it, and resume=latest still
/// continues the other run. Returns whether this was the first call, after which the
/// processes of a multi-rank run must wait for the lead (a barrier) before writing.
bool set_aside_before_first_save(const Config& cfg, bool lead, bool& done);

/// What the lead says of the resume as the run starts; "" when nothing needs saying:
/// that resume=latest found no checkpoint in run_dir, so the run starts at step 0 (a
/// mistyped run_dir shows here, not after a whole run); or that train_data now holds
/// another number of tokens than the checkpoint was trained on, so the training
/// sequences from here on come in another order than an unbroken run's.
std::string start_notes(const Config& cfg);

/// Deletes all but the newest `keep` complete checkpoints (keep <= 0 keeps all). Each is
/// renamed step_N.pruned before its files go, so that a job killed while deleting leaves
/// no step_N that looks like a damaged checkpoint; the next prune deletes what is left of
/// any step_N.pruned.
/// In a multi-rank run call it on rank 0 only (after the save has returned): ranks
/// deleting the same directories at once would race, and one may fail on a file that
/// another has just removed.
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace gpt
