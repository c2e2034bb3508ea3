// The checkpoints of a run directory: the newest complete one, pruning the oldest,
// what `resume` names, and setting aside another run's later checkpoints.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <array>
#include <span>
#include <map>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/checkpoint_internal.h"
#include "common/data.h"
#include "common/error.h"
#include "common/optimizer.h"

namespace gpt {
using namespace checkpoint_detail;

namespace {

// A checkpoint being deleted is first renamed step_N.pruned: deleting takes many calls,
// and a job killed among them must not leave a step_N without its manifest, which no
// listing counts as a checkpoint and so no later prune would ever delete.
constexpr std::string_view kPrunedSuffix = ".pruned";

// The step a name step_N or step_N.old stands for (moved_aside: the .old copy publish()
// makes); false for any other name.
bool step_of_name(std::string name, int64_t& step, bool& moved_aside) {
  moved_aside = name.ends_with(".old");
  if (moved_aside) name.resize(name.size() - 4);
  return parse_step_dir_name(name, step);
}

// An entry of run_dir named after a step: step_N; step_N.old, the copy publish() moves
// aside while it replaces a step saved before; either with .pruned after it, a prune's.
struct StepEntry {
  int64_t step = 0;
  fs::path path;
  bool moved_aside = false;  // step_N.old
  bool pruned = false;       // step_N.pruned or step_N.old.pruned: being deleted
  bool directory = false;
  bool complete = false;     // a directory holding manifest.json (written last): a whole checkpoint
};

// run_dir's step entries, by step (none when run_dir does not exist: no run yet). Every
// question about run_dir's checkpoints is asked of this one listing, so all agree on
// what the names mean.
std::vector<StepEntry> step_entries(const std::string& run_dir) {
  std::vector<StepEntry> entries;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return entries;
  fs::directory_iterator it(run_dir, ec);
  if (ec) fail("cannot list " + run_dir + ": " + ec.message());
  for (const fs::directory_entry& found : it) {
    StepEntry entry;
    entry.path = found.path();
    std::string name = found.path().filename().string();
    entry.pruned = name.ends_with(kPrunedSuffix);
    if (entry.pruned) name.resize(name.size() - kPrunedSuffix.size());
    if (!step_of_name(name, entry.step, entry.moved_aside)) continue;
    std::error_code entry_ec;
    entry.directory = found.is_directory(entry_ec);
    entry.complete = entry.directory && fs::is_regular_file(found.path() / "manifest.json", entry_ec);
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(), [](const StepEntry& a, const StepEntry& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return entries;
}

// The step a checkpoint directory was written at, from its manifest.
int64_t checkpoint_step(const json& manifest, const std::string& path) {
  const auto step = manifest.find("step");
  if (step == manifest.end()) fail(path + "/manifest.json has no \"step\" (corrupt checkpoint manifest)");
  if (!step->is_number_integer() || step->get<int64_t>() < 0)
    fail(path + "/manifest.json has step " + step->dump() + ": a step count is an integer >= 0 (corrupt checkpoint "
         "manifest)");
  return step->get<int64_t>();
}

// Complete checkpoints in run_dir, sorted by step (oldest first). A step_N.old (the copy
// publish() moves aside while it replaces a step saved before) stands for step N only
// when step_N itself is missing: a job killed between publish()'s two renames leaves it
// as the only complete copy of that step. The name is what ranks them (for resume=latest
// and for pruning), so a checkpoint whose manifest says another step (a directory copied
// or renamed by hand) is an error: ranked by its name it would be resumed in the place of
// a later step, or prune the run's own newer checkpoints.
std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::vector<StepEntry>& entries,
                                                               const std::string& run_dir) {
  std::map<int64_t, fs::path> by_step;
  for (const StepEntry& entry : entries) {
    // Without its manifest a directory is no complete checkpoint: skipped, not resumed.
    if (entry.pruned || !entry.complete) continue;
    int64_t saved = entry.step;
    try {
      saved = checkpoint_step(read_manifest(entry.path), entry.path.string());
    } catch (const UserError&) {
      // A corrupt manifest: ranked by its name; loading it says what is wrong with it.
    }
    if (saved != entry.step)
      fail(entry.path.string() + " holds the checkpoint of step " + std::to_string(saved) +
           " (its manifest.json says so), not of step " + std::to_string(entry.step) +
           ": checkpoints in run_dir are ranked by their directory's name, for resume=latest and for pruning; "
           "move it out of " + run_dir + " (and resume it by its path), or rename it after its step");
    if (entry.moved_aside) by_step.emplace(entry.step, entry.path);  // never displaces step_N
    else by_step[entry.step] = entry.path;
  }
  return {by_step.begin(), by_step.end()};
}

// Whether the checkpoint directory `checkpoint` lies in `dir` (false when either is
// missing: a run_dir not made yet holds nothing). However the path is spelled: made
// absolute first (the parent of "step_00000002" or "./step_00000002" is the current
// directory, not ""), and the parent of "run/step_00000002/" or "run/step_00000002/." is
// the checkpoint itself until a trailing separator or dot is dropped.
bool in_directory(const std::string& checkpoint, const std::string& dir) {
  if (checkpoint.empty()) return false;
  std::error_code ec;
  fs::path path = fs::absolute(checkpoint, ec).lexically_normal();
  if (ec) return false;
  if (!path.has_filename()) path = path.parent_path();
  return fs::equivalent(path.parent_path(), dir, ec) && !ec;
}

}  // namespace

bool rewrites_resumed_checkpoint(const std::string& run_dir, const CheckpointState& state) {
  return !state.trained() && in_directory(state.resumed_from, run_dir);
}

bool saves_at_end(const Config& cfg, const CheckpointState& state) {
  const bool periodic = cfg.checkpoint_every > 0 && state.trained() && state.step % cfg.checkpoint_every == 0;
  return (cfg.checkpoint_at_end || periodic) && !rewrites_resumed_checkpoint(cfg.run_dir, state);
}

std::string latest_checkpoint(const std::string& run_dir) {
  const auto found = complete_checkpoints(step_entries(run_dir), run_dir);
  return found.empty() ? std::string() : found.back().second.string();
}

std::string checkpoint_or_latest(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && !fs::exists(fs::path(path) / "manifest.json", ec)) {
    const std::string latest = latest_checkpoint(path);
    if (!latest.empty()) return latest;
    // A step_N directory without its manifest is a damaged checkpoint, which loading
    // names; any other directory is a run directory with nothing saved yet.
    std::string name = path;  // without trailing slashes: step_00000002/ as a shell completes it
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    if (!fs::path(name).filename().string().starts_with("step_"))
      fail("'" + path + "' holds no checkpoint: it has no manifest.json of its own and no complete step_N "
           "directory inside (a run directory before its first save, or another directory)");
  }
  return path;
}

namespace {

void remove_checkpoint_dir(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) fail("cannot remove old checkpoint " + dir.string() + ": " + ec.message());
}

}  // namespace

void prune_checkpoints(const std::string& run_dir, int keep) {
  const std::vector<StepEntry> entries = step_entries(run_dir);
  // First what earlier prunes that were cut short left.
  for (const StepEntry& entry : entries)
    if (entry.pruned) remove_checkpoint_dir(entry.path);
  if (keep <= 0) return;
  const auto found = complete_checkpoints(entries, run_dir);
  if (found.size() <= size_t(keep)) return;
  const size_t remove = found.size() - size_t(keep);
  for (size_t i = 0; i < remove; ++i) {
    const fs::path& dir = found[i].second;
    const fs::path doomed = dir.string() + std::string(kPrunedSuffix);
    std::error_code ec;
    fs::rename(dir, doomed, ec);  // one call: the checkpoint is whole, or out of the step_N names
    if (ec) fail("cannot remove old checkpoint " + dir.string() + ": renaming it " + doomed.string() + ": " +
                 ec.message());
    remove_checkpoint_dir(doomed);
  }
}

namespace {

// The checkpoint `resume` names ("" for a fresh start) and the step the run starts from.
struct ResumeSource {
  std::string path;
  int64_t start = 0;
  json manifest;  // the checkpoint's manifest, read once (null for a fresh start)
};
ResumeSource resume_source(const Config& cfg) {
  // "Latest" or "LATEST" is a path that is not there: name the word that was meant.
  std::string lower = cfg.resume;
  for (char& c : lower) c = char(std::tolower(static_cast<unsigned char>(c)));
  std::error_code ec;
  if (lower == "latest" && cfg.resume != "latest" && !fs::exists(cfg.resume, ec))
    fail("resume=" + cfg.resume + ": no such checkpoint; for the newest checkpoint in run_dir write resume=latest");
  ResumeSource r;
  r.path = cfg.resume == "latest" ? latest_checkpoint(cfg.run_dir) : cfg.resume;
  if (!r.path.empty()) {
    try {  // each way the checkpoint is not one, said of the key that named it
      r.manifest = read_manifest(r.path);  // a .tmp directory (a save in progress) refused by name
      r.start = checkpoint_step(r.manifest, r.path);
      // The model's shape, as loading checks it, but before anything else is said of the
      // run (a manifest of another format or version is left to the loader, which names it).
      const json& m = r.manifest;
      if (m.contains("format") && m["format"] == kFormat && m.contains("version") && m["version"] == kVersion)
        check_model(m, cfg.model, (fs::path(r.path) / "manifest.json").string());
      int64_t named = 0;
      bool moved_aside = false;
      fs::path dir = fs::path(r.path).lexically_normal();
      if (!dir.has_filename()) dir = dir.parent_path();  // "run/step_00000002/"
      if (step_of_name(dir.filename().string(), named, moved_aside) && named != r.start)
        fail(r.path + " is named after step " + std::to_string(named) + " but holds the checkpoint of step " +
             std::to_string(r.start) + " (its manifest.json says so): rename it after its step, so that no "
             "run ranks it in the place of another");
    } catch (const UserError& e) {
      fail("resume=" + cfg.resume + ": " + e.what());
    }
  }
  return r;
}

// A resumed run reads its training data on from the checkpoint's data position (the
// sequences its steps consumed: any batch_size may follow), in seed's order, in windows
// of seq_len tokens: those two must be the ones the checkpoint was trained with, or the
// sequences it counts are other windows, and the run would skip or repeat data without
// a word. At step 0 nothing was read yet, so anything goes (GPT-2's weights, imported,
// fine-tuned with data of one's own); a run that trains no step (steps=0, or the
// checkpoint's own) reads no training data, and may evaluate and sample with another
// seq_len or seed. A checkpoint that records no config (written before it did) has
// nothing to compare.
void require_same_data_stream(const Config& cfg, const ResumeSource& source) {
  const std::string& path = source.path;
  const int64_t start = source.start;
  if (start == 0 || cfg.steps <= start) return;
  const auto saved = source.manifest.find("config");
  if (saved == source.manifest.end() || !saved->is_object()) return;
  const std::pair<const char*, json> ours[] = {{"seq_len", cfg.seq_len}, {"seed", cfg.seed}};
  for (const auto& [key, value] : ours) {
    const auto theirs = saved->find(key);
    if (theirs == saved->end() || *theirs == value) continue;
    fail("resume=" + path + ": " + key + "=" + value.dump() + ", but the checkpoint was trained with " + key + "=" +
         theirs->dump() + ": its data position counts sequences of seq_len tokens in seed's order, so this run "
         "would skip or repeat training data; resume with " + key + "=" + theirs->dump() + ", or start a fresh run");
  }
}

// AdamW's moments are part of the optimizer's state; plain SGD keeps none and saves zeros
// in their place. Past step 0 a checkpoint resumed with the other optimizer would either
// start AdamW from zero moments with a bias correction for the steps before (a first
// update of about lr, whatever the gradient's size), or drop the moments it holds.
void require_same_optimizer(const Config& cfg, const ResumeSource& source) {
  if (source.start == 0 || cfg.steps <= source.start) return;
  const auto saved = source.manifest.find("config");
  if (saved == source.manifest.end() || !saved->is_object()) return;
  const auto theirs = saved->find("optimizer");
  if (theirs == saved->end() || !theirs->is_string() || *theirs == cfg.optimizer) return;
  fail("resume=" + source.path + ": optimizer=" + cfg.optimizer + ", but the checkpoint was trained with optimizer=" +
       theirs->get<std::string>() + ": " +
       (cfg.optimizer == "adamw" ? "its AdamW moments are zeros (SGD keeps none), and AdamW's bias correction "
                                   "would treat them as " + std::to_string(source.start) + " steps of history"
                                 : std::string("SGD would drop the AdamW moments it holds")) +
       "; resume with optimizer=" + theirs->get<std::string>() + ", or start a fresh run");
}

// A checkpoint counts at most 2^62 sequences read (checkpoint.cpp); a run whose steps
// would read past that from the recorded position could not save a checkpoint its own
// loader reads (a position edited by hand: no real run comes near).
void require_room_for_sequences(const Config& cfg, const ResumeSource& source) {
  if (cfg.steps <= source.start) return;
  const auto position = source.manifest.find("data_position");
  if (position == source.manifest.end() || !position->is_object()) return;
  const auto read = position->find("sequences");
  if (read == position->end() || !read->is_number_integer()) return;  // loading says what is wrong with it
  constexpr int64_t kMostSequences = int64_t(1) << 62;
  const int64_t sequences = read->get<int64_t>(), steps = cfg.steps - source.start;
  if (sequences >= 0 && sequences <= kMostSequences && steps > (kMostSequences - sequences) / cfg.batch_size)
    fail("resume=" + source.path + ": its data position is " + std::to_string(sequences) + " sequences, and " +
         std::to_string(steps) + " more steps of batch_size " + std::to_string(cfg.batch_size) +
         " would read past 2^62, the most a checkpoint counts: a position that large was edited by hand");
}

// The checkpoint to resume, read once, after every check a resume must pass (what
// resolve_resume refuses): start_notes speaks only of a resume that goes ahead.
ResumeSource checked_resume_source(const Config& cfg) {
  ResumeSource source = resume_source(cfg);
  const std::string& path = source.path;
  const int64_t start = source.start;
  if (!path.empty()) {
    require_same_data_stream(cfg, source);
    require_same_optimizer(cfg, source);
    require_room_for_sequences(cfg, source);
  }
  // `steps` counts from the start of the run, not from the resume. Below the checkpoint's
  // step it is a mistake (the run would train nothing and save the checkpoint again
  // under its step); 0 is the way to train nothing and only evaluate and sample.
  if (cfg.steps > 0 && cfg.steps < start)
    fail("steps=" + std::to_string(cfg.steps) + " is below step " + std::to_string(start) + " of the checkpoint " +
         path + " (steps counts from the start of the run, resumed runs included): set steps above " +
         std::to_string(start) + " to train on, or steps=0 to only evaluate and sample it");
  return source;
}

}  // namespace

std::string resolve_resume(const Config& cfg) { return checked_resume_source(cfg).path; }

namespace {

// Training data of another size: the same data position now counts sequences of another
// order (data.h), neither the ones the checkpoint's steps read nor the rest of their
// epoch. Said, not refused: training on from a checkpoint with more (or other) data may
// be what is meant.
std::string data_note(const Config& cfg, const ResumeSource& source) {
  const auto position = source.manifest.find("data_position");
  if (position == source.manifest.end() || !position->is_object()) return "";
  const auto then = position->find("train_tokens");
  // A count that is not one is refused when the checkpoint loads (checkpoint.cpp): no note.
  if (then == position->end() || !then->is_number_integer()) return "";
  if (then->is_number_unsigned() ? then->get<uint64_t>() > uint64_t(INT64_MAX) : then->get<int64_t>() < 0) return "";
  const int64_t now = stream_tokens(cfg.train_data);
  if (now == then->get<int64_t>()) return "";
  return "resume=" + cfg.resume + ": train_data '" + cfg.train_data + "' holds " + std::to_string(now) +
         " tokens, but the checkpoint was trained on " + then->dump() + ": the sequences are shuffled by their "
         "count, so from here on they come in another order than the checkpoint's run would have read them (in "
         "this epoch some it trained on come again, and some it has not read are skipped)";
}

// The keys `keys` the checkpoint's run recorded with another value than `cfg` has:
// "key then -> now, ..." ("" when none differs, or the checkpoint records no config).
std::string changed_keys(const Config& cfg, const json& saved, std::span<const char* const> keys) {
  const json now = json::parse(config_to_json(cfg));
  std::string changed;
  for (const char* key : keys) {
    const auto theirs = saved.find(key), ours = now.find(key);
    if (theirs == saved.end() || ours == now.end() || *theirs == *ours) continue;
    changed += std::string(changed.empty() ? "" : ", ") + key + " " + theirs->dump() + " -> " + ours->dump();
  }
  return changed;
}

// The learning rate is a function of the step and of the schedule's keys (optimizer.h):
// one of them changed on resume moves it from the next step on, by a little or by a jump
// (a cosine decay stretched or cut short). Said, with the rate the next step takes and
// the one the checkpoint's run would have taken (or, past its end, the one it ended at).
std::string schedule_note(const Config& cfg, const ResumeSource& source, const json& saved) {
  // The keys learning_rate() reads.
  static constexpr std::array<const char*, 6> kScheduleKeys = {"steps",       "lr",          "warmup_steps",
                                                                "lr_schedule", "min_lr_ratio", "lr_decay_fraction"};
  const std::string changed = changed_keys(cfg, saved, kScheduleKeys);
  if (changed.empty()) return "";
  Config then = cfg;  // the schedule the checkpoint's run followed
  json kept = json::object();
  for (const char* key : kScheduleKeys)
    if (const auto it = saved.find(key); it != saved.end()) kept[key] = *it;
  try {
    apply_json_text(then, kept.dump(), source.path + "/manifest.json");
  } catch (const UserError&) {
    return "";  // a recorded value this version does not read: nothing to compare
  }
  const double now_lr = learning_rate(cfg, source.start), then_lr = learning_rate(then, source.start);
  const long long next = source.start + 1;
  char rates[192];
  if (source.start >= then.steps)  // the checkpoint's run had ended: no rate of its own to compare
    std::snprintf(rates, sizeof rates, "step %lld trains at lr %.4g (the checkpoint's run ended at step %lld, "
                  "at lr %.4g)", next, now_lr, static_cast<long long>(then.steps),
                  learning_rate(then, then.steps - 1));
  else if (now_lr == then_lr)
    std::snprintf(rates, sizeof rates, "step %lld trains at lr %.4g, as the checkpoint's run would have", next,
                  now_lr);
  else
    std::snprintf(rates, sizeof rates, "step %lld trains at lr %.4g, where the checkpoint's run would have used %.4g",
                  next, now_lr, then_lr);
  return "resume=" + cfg.resume + ": the learning-rate schedule changed (" + changed + "): " + rates;
}

// A validation reads the first val_batches x micro_batch_size windows of val_data (data.h):
// another count is another set of windows, and the validation loss steps where the run
// resumed, whatever the model does.
std::string validation_note(const Config& cfg, const json& saved) {
  if (cfg.val_batches == 0) return "";
  const auto batches = saved.find("val_batches"), micro = saved.find("micro_batch_size");
  if (batches == saved.end() || micro == saved.end() || !batches->is_number_integer() ||
      !micro->is_number_integer())
    return "";
  const int64_t then = batches->get<int64_t>() * micro->get<int64_t>();
  const int64_t now = int64_t(cfg.val_batches) * cfg.micro_batch_size;
  if (then == now || batches->get<int64_t>() == 0) return "";
  return "resume=" + cfg.resume + ": a validation now reads " + std::to_string(now) + " windows (val_batches " +
         std::to_string(cfg.val_batches) + " x micro_batch_size " + std::to_string(cfg.micro_batch_size) +
         "), the checkpoint's run read " + std::to_string(then) + " (" + batches->dump() + " x " + micro->dump() +
         "): its validation loss is over other windows from here on, and its curve may step";
}

// The update's own keys changed on resume: AdamW's decay rates and epsilon, the weight
// decay, the clip, or the precision the weights compute in. Any may change (a fine-tune
// with other decay, say), but the checkpoint's moments were made under the old values and
// the next step continues from them: said, with both values, so that a config file other
// than the checkpoint's run's does not change the update without a word.
std::string update_note(const Config& cfg, const ResumeSource& source, const json& saved) {
  static constexpr std::array<const char*, 6> kAdamWKeys = {"grad_clip", "precision", "weight_decay",
                                                             "beta1",     "beta2",     "adam_eps"};
  const bool adamw = cfg.optimizer == "adamw";  // SGD reads the first two (and a resume keeps the optimizer)
  const std::string changed = changed_keys(cfg, saved, std::span(kAdamWKeys).first(adamw ? 6 : 2));
  if (changed.empty()) return "";
  return "resume=" + cfg.resume + ": the update changed (" + changed + "): from step " +
         std::to_string(source.start + 1) + " " + cfg.optimizer + " steps with these values" +
         (adamw ? ", on moments the old ones made" : "");
}

// resume=latest passes over a step_N directory without its manifest (the manifest is
// written last, so the directory is no complete checkpoint: damaged, or emptied by hand).
// One newer than the checkpoint resumed is said, or the run would seem to have lost its
// steps without a word: the names of those past step `after`, comma-separated ("" if none).
std::string incomplete_checkpoints_after(const std::string& run_dir, int64_t after) {
  std::string names;
  for (const StepEntry& entry : step_entries(run_dir))
    if (!entry.pruned && entry.directory && !entry.complete && entry.step > after)
      names += (names.empty() ? "" : ", ") + entry.path.filename().string();
  return names;
}

}  // namespace

std::string start_notes(const Config& cfg) {
  if (cfg.resume.empty()) return "";
  // Refused resumes get no notes: their refusal comes first. resume=latest in a run_dir
  // without checkpoints: no path.
  const ResumeSource source = checked_resume_source(cfg);
  std::string notes;
  const auto add = [&](const std::string& note) {
    if (!note.empty()) notes += (notes.empty() ? "" : "\n") + note;
  };
  if (cfg.resume == "latest") {
    const std::string skipped = incomplete_checkpoints_after(cfg.run_dir, source.path.empty() ? -1 : source.start);
    if (!skipped.empty())
      add("resume=latest: passed over " + skipped + " in " + cfg.run_dir + ": no manifest.json, so not a complete "
          "checkpoint (damaged, or emptied by hand; an earlier version's prune, cut short, left such); a save of "
          "this run first moves it into a set_aside_ directory");
  }
  if (source.path.empty()) {
    add("resume=latest: no complete checkpoint in " + cfg.run_dir + " yet, so training starts at step 0");
    return notes;
  }
  // A run that trains nothing changes nothing; step 0 (a fresh start, GPT-2's imported
  // weights) has no schedule, data or validation of its own to continue.
  if (source.start == 0 || cfg.steps <= source.start) return notes;
  add(data_note(cfg, source));
  if (const auto saved = source.manifest.find("config"); saved != source.manifest.end() && saved->is_object()) {
    add(schedule_note(cfg, source, *saved));
    add(validation_note(cfg, *saved));
    add(update_note(cfg, source, *saved));
  }
  return notes;
}

namespace {

// Whether two paths name one file (false when either is missing).
bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// Moves what this run could overwrite or prune as its own into a set_aside_ directory
// (checkpoint.h): every entry of run_dir named step_N or step_N.old with N at or past
// the run's start, a complete checkpoint or not (a save publishes step_N over whatever
// has that name, and a fresh run's step 0 is saved over another run's step 0), except
// the checkpoint the run resumes, its own past. Returns a line saying what moved, ""
// when nothing did. Called before the run's first save only, so the run writes a
// checkpoint: one that trains no step from its own run_dir (rewrites_resumed_checkpoint)
// never gets here.
std::string set_aside_later_checkpoints(const Config& cfg) {
  const ResumeSource source = resume_source(cfg);
  std::vector<fs::path> later;  // by step
  for (const StepEntry& entry : step_entries(cfg.run_dir)) {  // step_N and step_N.old alike
    if (entry.pruned || entry.step < source.start) continue;  // a prune's are the next prune's to delete
    if (!source.path.empty() && same_file(entry.path, source.path)) continue;
    later.push_back(entry.path);
  }
  if (later.empty()) return "";
  // A directory of its own, named by the time; never a step_ name, so no reader takes it
  // for a checkpoint of this run.
  const std::time_t now = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::gmtime(&now));
  const std::string base = std::string("set_aside_") + stamp;
  std::error_code ec;
  fs::path aside = fs::path(cfg.run_dir) / base;
  for (int n = 2; fs::exists(aside); ++n) aside = fs::path(cfg.run_dir) / (base + "-" + std::to_string(n));
  fs::create_directory(aside, ec);
  if (ec) fail("cannot create " + aside.string() + " to set earlier checkpoints aside: " + ec.message());
  for (const fs::path& path : later) {
    fs::rename(path, aside / path.filename(), ec);  // same file system: atomic, nothing copied
    if (ec) fail("cannot move " + path.string() + " into " + aside.string() + ": " + ec.message());
  }
  fsync_directory(cfg.run_dir);
  std::string line = "run_dir " + cfg.run_dir + " held " + std::to_string(later.size());
  line += " checkpoint(s) or other step_ entries at or past step " + std::to_string(source.start);
  line += " (up to " + later.back().filename().string() + "), not the checkpoint this run resumes: moved to ";
  line += aside.string() + " so that the two runs' checkpoints do not mix";
  return line;
}

}  // namespace

bool set_aside_before_first_save(const Config& cfg, bool lead, bool& done) {
  if (done) return false;
  done = true;
  if (lead) {
    const std::string line = set_aside_later_checkpoints(cfg);
    if (!line.empty()) std::printf("%s\n", line.c_str());
  }
  return true;
}

}  // namespace gpt
