// CheckpointMirror: the host buffers a checkpoint reads and writes, for arrays that
// may live on a GPU and hold floats or doubles (common/checkpoint.h).
#include <algorithm>
#include <type_traits>
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
    mirrors_.emplace_back(e.array && !e.array->on_host() ? e.count : 0);
    mirrors64_.emplace_back(e.array64 && !e.array64->on_host() ? e.count : 0);
  }
}

template <class T>
T* CheckpointMirror::host(const std::string& kind) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.kind != kind) continue;
    if constexpr (std::is_same_v<T, float>) {
      invariant(e.array != nullptr, "CheckpointMirror: '" + kind + "' holds doubles, not floats");
      return mirrors_[i].empty() ? e.array->data() + e.offset : mirrors_[i].data();
    } else {
      invariant(e.array64 != nullptr, "CheckpointMirror: '" + kind + "' holds floats, not doubles");
      return mirrors64_[i].empty() ? e.array64->data() + e.offset : mirrors64_[i].data();
    }
  }
  internal_error("CheckpointMirror: no buffer of kind '" + kind + "'");
}
template float* CheckpointMirror::host<float>(const std::string&);
template double* CheckpointMirror::host<double>(const std::string&);

std::vector<CheckpointBuffer> CheckpointMirror::buffers() {
  std::vector<CheckpointBuffer> out;
  for (const Entry& e : entries_) {
    const int64_t end = begin_ + int64_t(e.count);
    if (e.array64) out.push_back({e.kind, nullptr, begin_, end, host<double>(e.kind)});
    else out.push_back({e.kind, host<float>(e.kind), begin_, end});
  }
  return out;
}

void CheckpointMirror::to_host() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!mirrors_[i].empty()) e.array->copy_to_host(mirrors_[i].data(), e.count, e.offset);
    if (!mirrors64_[i].empty()) e.array64->copy_to_host(mirrors64_[i].data(), e.count, e.offset);
  }
}

void CheckpointMirror::to_device() {
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (!mirrors_[i].empty()) e.array->copy_from_host(mirrors_[i].data(), e.count, e.offset);
    if (!mirrors64_[i].empty()) e.array64->copy_from_host(mirrors64_[i].data(), e.count, e.offset);
  }
}

}  // namespace gpt
