// Local layouts <-> flat shards; see layout_exchange.h.
//
// local_to_flat, on every rank:
//   1. cut each counted run at the shard boundaries: pieces (global offset, length, local
//      offset), grouped by the owner of the shard;
//   2. all-gather how many pieces each rank sends each owner, so every receive of
//      metadata (the pieces' global offsets and lengths) is posted with its exact size;
//   3. exchange the metadata and wait; size each receive of values from the metadata
//      received, exchange the values, wait, and place them.
// flat_to_local runs the same with the roles swapped: a rank sends each owner the pieces
// it needs, and the owner answers with their values.
#include "common/layout_exchange.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace gpt {

FlatShard flat_shard(int64_t total, int ranks, int rank) {
  return {total * rank / ranks, total * (rank + 1) / ranks};
}

namespace {

constexpr int kTagPieces = 1, kTagValues = 2;

struct Piece {
  int64_t global, length, local;
};

// The runs of `layout` (counted ones only, or all) cut at the shard boundaries, by owner.
std::vector<std::vector<Piece>> pieces_by_owner(const RankLayout& layout, int ranks, bool counted_only) {
  const int64_t total = layout.global().total();
  std::vector<std::vector<Piece>> out(static_cast<size_t>(ranks));
  for (const LayoutRun& run : layout.runs()) {
    if (counted_only && !run.counted) continue;
    int64_t g = run.global, l = run.local, left = run.length;
    while (left > 0) {
      // owner of g: the largest r with total * r / ranks <= g
      int owner = int((g * ranks) / total);
      while (owner + 1 < ranks && flat_shard(total, ranks, owner + 1).begin <= g) ++owner;
      while (flat_shard(total, ranks, owner).begin > g) --owner;
      const int64_t take = std::min(left, flat_shard(total, ranks, owner).end - g);
      out[size_t(owner)].push_back({g, take, l});
      g += take, l += take, left -= take;
    }
  }
  return out;
}

// How many pieces each rank sends each rank: counts[from * n + to].
std::vector<double> piece_counts(Communicator& comm, const std::vector<std::vector<Piece>>& by_owner) {
  const size_t n = size_t(comm.size());
  std::vector<double> mine(n), all(n * n);
  for (size_t o = 0; o < n; ++o) mine[o] = double(by_owner[o].size());
  comm.all_gather(mine.data(), all.data(), n, DType::F64);
  return all;
}

std::vector<double> encode(const std::vector<Piece>& pieces) {
  std::vector<double> meta;
  for (const Piece& p : pieces) meta.push_back(double(p.global)), meta.push_back(double(p.length));
  return meta;
}

int64_t elements(const std::vector<Piece>& pieces) {
  int64_t n = 0;
  for (const Piece& p : pieces) n += p.length;
  return n;
}

}  // namespace

void local_to_flat(Communicator& comm, const RankLayout& layout, const float* local, float* shard_out) {
  const int n = comm.size(), me = comm.rank();
  const FlatShard mine = flat_shard(layout.global().total(), n, me);
  const auto by_owner = pieces_by_owner(layout, n, /*counted_only=*/true);
  const std::vector<double> counts = piece_counts(comm, by_owner);

  // Outgoing: per owner, the pieces' (offset, length) and their values in piece order.
  std::vector<std::vector<double>> out_meta(static_cast<size_t>(n));
  std::vector<std::vector<float>> out_values(static_cast<size_t>(n));
  std::vector<Request> requests;
  for (int o = 0; o < n; ++o) {
    out_meta[size_t(o)] = encode(by_owner[size_t(o)]);
    for (const Piece& p : by_owner[size_t(o)])
      out_values[size_t(o)].insert(out_values[size_t(o)].end(), local + p.local, local + p.local + p.length);
  }
  // Incoming: from each sender, its metadata first (sizes from the counts), then values.
  std::vector<std::vector<double>> in_meta(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    in_meta[size_t(s)].resize(2 * size_t(counts[size_t(s) * n + size_t(me)]));
    requests.push_back(comm.irecv(in_meta[size_t(s)].data(), in_meta[size_t(s)].size(), DType::F64, s, kTagPieces));
  }
  for (int o = 0; o < n; ++o)
    requests.push_back(comm.isend(out_meta[size_t(o)].data(), out_meta[size_t(o)].size(), DType::F64, o, kTagPieces));
  comm.wait_all(requests);
  requests.clear();
  std::vector<std::vector<float>> in_values(static_cast<size_t>(n));
  for (int s = 0; s < n; ++s) {
    int64_t count = 0;
    for (size_t k = 1; k < in_meta[size_t(s)].size(); k += 2) count += int64_t(in_meta[size_t(s)][k]);
    in_values[size_t(s)].resize(size_t(count));
    requests.push_back(comm.irecv(in_values[size_t(s)].data(), size_t(count), DType::F32, s, kTagValues));
  }
  for (int o = 0; o < n; ++o)
    requests.push_back(comm.isend(out_values[size_t(o)].data(), out_values[size_t(o)].size(), DType::F32, o, kTagValues));
  comm.wait_all(requests);

  int64_t placed = 0;
  for (int s = 0; s < n; ++s) {
    const std::vector<double>& meta = in_meta[size_t(s)];
    const float* v = in_values[size_t(s)].data();
    for (size_t k = 0; k < meta.size(); k += 2) {
      const int64_t g = int64_t(meta[k]), len = int64_t(meta[k + 1]);
      invariant(g >= mine.begin && g + len <= mine.end, "local_to_flat: a piece outside this rank's shard");
      std::memcpy(shard_out + (g - mine.begin), v, size_t(len) * sizeof(float));
      v += len, placed += len;
    }
  }
  require(placed == mine.size(), "layout: the ranks' counted elements fill " + std::to_string(placed) + " of the " +
                                     std::to_string(mine.size()) + " elements of shard " + std::to_string(me) +
                                     " (a layout misses elements or counts some twice)");
}

void flat_to_local(Communicator& comm, const RankLayout& layout, const float* shard, float* local) {
  const int n = comm.size(), me = comm.rank();
  const FlatShard mine = flat_shard(layout.global().total(), n, me);
  const auto by_owner = pieces_by_owner(layout, n, /*counted_only=*/false);
  const std::vector<double> counts = piece_counts(comm, by_owner);

  // Requests: what this rank needs from each owner; the owner learns what each rank needs.
  std::vector<std::vector<double>> want(static_cast<size_t>(n)), asked(static_cast<size_t>(n));
  std::vector<Request> requests;
  for (int s = 0; s < n; ++s) {
    asked[size_t(s)].resize(2 * size_t(counts[size_t(s) * n + size_t(me)]));
    requests.push_back(comm.irecv(asked[size_t(s)].data(), asked[size_t(s)].size(), DType::F64, s, kTagPieces));
  }
  for (int o = 0; o < n; ++o) {
    want[size_t(o)] = encode(by_owner[size_t(o)]);
    requests.push_back(comm.isend(want[size_t(o)].data(), want[size_t(o)].size(), DType::F64, o, kTagPieces));
  }
  comm.wait_all(requests);
  requests.clear();
  // Answers: the values asked for, from this rank's shard; and the values this rank wanted.
  std::vector<std::vector<float>> answers(static_cast<size_t>(n)), received(static_cast<size_t>(n));
  for (int o = 0; o < n; ++o) {
    received[size_t(o)].resize(size_t(elements(by_owner[size_t(o)])));
    requests.push_back(comm.irecv(received[size_t(o)].data(), received[size_t(o)].size(), DType::F32, o, kTagValues));
  }
  for (int s = 0; s < n; ++s) {
    const std::vector<double>& meta = asked[size_t(s)];
    for (size_t k = 0; k < meta.size(); k += 2) {
      const int64_t g = int64_t(meta[k]), len = int64_t(meta[k + 1]);
      invariant(g >= mine.begin && g + len <= mine.end, "flat_to_local: asked for a piece outside this rank's shard");
      answers[size_t(s)].insert(answers[size_t(s)].end(), shard + (g - mine.begin), shard + (g - mine.begin) + len);
    }
    requests.push_back(comm.isend(answers[size_t(s)].data(), answers[size_t(s)].size(), DType::F32, s, kTagValues));
  }
  comm.wait_all(requests);
  for (int o = 0; o < n; ++o) {
    const float* v = received[size_t(o)].data();
    for (const Piece& p : by_owner[size_t(o)]) {
      std::memcpy(local + p.local, v, size_t(p.length) * sizeof(float));
      v += p.length;
    }
  }
}

std::string save_checkpoint_local(Communicator& comm, const std::string& run_dir, const Config& cfg,
                                  const RankLayout& layout, const CheckpointState& state,
                                  const std::vector<LocalBuffer>& buffers) {
  const FlatShard mine = flat_shard(layout.global().total(), comm.size(), comm.rank());
  std::vector<std::vector<float>> shards(buffers.size(), std::vector<float>(size_t(mine.size())));
  std::vector<CheckpointBuffer> flat;
  for (size_t k = 0; k < buffers.size(); ++k) {
    local_to_flat(comm, layout, buffers[k].data, shards[k].data());
    flat.push_back({buffers[k].kind, shards[k].data(), mine.begin, mine.end});
  }
  return save_checkpoint_sharded(comm, run_dir, cfg, layout.global(), state, flat);
}

CheckpointState load_checkpoint_local(Communicator& comm, const std::string& path, const RankLayout& layout,
                                      const std::vector<LocalBuffer>& buffers) {
  const FlatShard mine = flat_shard(layout.global().total(), comm.size(), comm.rank());
  std::vector<std::vector<float>> shards(buffers.size(), std::vector<float>(size_t(mine.size())));
  std::vector<CheckpointBuffer> flat;
  for (size_t k = 0; k < buffers.size(); ++k) flat.push_back({buffers[k].kind, shards[k].data(), mine.begin, mine.end});
  const CheckpointState state = load_checkpoint_sharded(comm, path, layout.global(), flat);
  for (size_t k = 0; k < buffers.size(); ++k) flat_to_local(comm, layout, shards[k].data(), buffers[k].data);
  return state;
}

}  // namespace gpt
