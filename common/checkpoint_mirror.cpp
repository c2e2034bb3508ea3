// CheckpointMirror: the host buffers a checkpoint reads and writes, for arrays that
// may live on a GPU or hold doubles (common/checkpoint.h).
#include <algorithm>
#include <vector>

#include "common/checkpoint.h"
#include "common/error.h"

namespace gpt {

CheckpointMirror::CheckpointMirror(std::vector<Entry> entries, int64_t begin)
    : entries_(std::move(entries)), begin_(begin) {
  for (Entry& e : entries_) {
    invariant((e.array == nullptr) != (e.array64 == nullptr), "CheckpointMirror: entry '" + e.kind +
                                                                   "' needs exactly one array");
    const size_t size = e.array64 ? e.array64->size() : e.array->size();
    invariant(e.offset <= size, "CheckpointMirror: entry '" + e.kind + "' starts past its array");
    e.count = std::min(e.count, size - e.offset);
    mirrors_.emplace_back(e.array64 || !e.array->on_host() ? e.count : 0);
  }
}

float* CheckpointMirror::host(const std::string& kind) {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].kind == kind)
      return mirrors_[i].empty() && entries_[i].array ? entries_[i].array->data() + entries_[i].offset
                                                      : mirrors_[i].data();
  internal_error("CheckpointMirror: no buffer of kind '" + kind + "'");
}

std::vector<CheckpointBuffer> CheckpointMirror::buffers() {
  std::vector<CheckpointBuffer> out;
  for (const Entry& e : entries_) out.push_back({e.kind, host(e.kind), begin_, begin_ + int64_t(e.count)});
  return out;
}

void CheckpointMirror::to_host() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.array64) {
      std::vector<double> values(e.count);
      e.array64->copy_to_host(values.data(), values.size(), e.offset);
      for (size_t k = 0; k < values.size(); ++k) mirrors_[i][k] = float(values[k]);
    } else if (!e.array->on_host()) {
      e.array->copy_to_host(mirrors_[i].data(), e.count, e.offset);
    }
  }
}

void CheckpointMirror::to_device() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.array64) {
      std::vector<double> values(mirrors_[i].begin(), mirrors_[i].end());
      e.array64->copy_from_host(values.data(), values.size(), e.offset);
    } else if (!e.array->on_host()) {
      e.array->copy_from_host(mirrors_[i].data(), e.count, e.offset);
    }
  }
}

}  // namespace gpt
