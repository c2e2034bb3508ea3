// Agreement between the ranks of a collective save (save_checkpoint_sharded).
//
// A collective writer must never leave a rank waiting: if
// rank 0 cannot create the directory and simply threw, the other ranks would sit in
// the next collective until the communicator's timeout, then report a lost peer
// instead of the real cause. So every step that can fail runs inside attempt(), which
// catches the error, and is followed by agree(), a collective every rank reaches
// whatever happened: it tells every rank whether any rank failed and, if one did,
// every rank throws the same error (the lowest failing rank's). agree() is also the
// barrier between steps: its all-reduce cannot complete on any rank before every rank
// has entered it, i.e. has finished the step before it.
#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "common/checkpoint_internal.h"
#include "common/comm.h"

namespace gpt::checkpoint_detail {
namespace {

// Copies root's string to every rank. The communicator moves typed elements; a
// broadcast copies them without looking at them, so text travels as two-byte
// elements (the bf16 type), padded to an even length, after its length.
void broadcast_string(Communicator& comm, std::string& text, int root) {
  double length = double(text.size());
  comm.broadcast(&length, 1, DType::F64, root);
  if (length == 0) {
    text.clear();
    return;
  }
  std::string padded = text;
  padded.resize(size_t(length) + size_t(length) % 2);
  comm.broadcast(padded.data(), padded.size() / 2, DType::BF16, root);
  text = padded.substr(0, size_t(length));
}

// [begin, end), built by appending: GCC 12 warns (-Wrestrict, wrongly) on "[" + to_string.
std::string slice_text(int64_t begin, int64_t end) {
  std::string text = "[";
  text += std::to_string(begin);
  text += ", ";
  text += std::to_string(end);
  return text + ")";
}

}  // namespace

void agree(Communicator& comm, const Outcome& mine) {
  if (comm.size() == 1) {
    // One rank: nothing to tell anyone; its error goes out exactly as the single
    // writer's would.
    if (mine.error) std::rethrow_exception(mine.error);
    return;
  }
  // Slot r holds rank r's error kind (0 for none): each rank fills its own slot and
  // the sum over ranks fills them all.
  std::vector<double> kinds(size_t(comm.size()), 0.0);
  kinds[size_t(comm.rank())] = double(int(mine.kind));
  comm.all_reduce(kinds.data(), kinds.size(), DType::F64);
  const auto first = std::find_if(kinds.begin(), kinds.end(), [](double k) { return k != 0.0; });
  if (first == kinds.end()) return;
  const int origin = int(first - kinds.begin());
  std::string message = comm.rank() == origin ? mine.message : std::string();
  broadcast_string(comm, message, origin);
  message = "rank " + std::to_string(origin) + ": " + message;
  switch (ErrorKind(int(*first))) {
    case ErrorKind::User: throw AgreedError(message, comm.size());
    case ErrorKind::InvalidArgument: throw std::invalid_argument(message);
    default: throw std::runtime_error(message);
  }
}

// Every rank must pass the same kinds, of the same types, in the same order: the files
// are created, and the table written, from rank 0's list, and a rank's slice is matched
// to a file by position in the exchange below.
void check_same_kinds(Communicator& comm, const std::vector<CheckpointBuffer>& buffers) {
  std::string mine;
  for (const CheckpointBuffer& b : buffers) mine += (mine.empty() ? "" : ", ") + b.kind + " (" + b.dtype() + ")";
  std::string rank0 = mine;
  broadcast_string(comm, rank0, 0);
  agree(comm, attempt([&] {
    if (mine != rank0)
      throw std::invalid_argument("save_checkpoint_sharded: rank " + std::to_string(comm.rank()) +
                                  " passes the kinds [" + mine + "] but rank 0 passes [" + rank0 +
                                  "]; every rank must pass the same kinds, of the same types, in the same order");
  }));
}

// For each kind, the ranks' slices must cover [0, total) once: a gap would leave bytes
// nobody wrote (zeros, checksummed as if real) and an overlap would let two ranks
// race on the same bytes. Every rank gathers every rank's slices and checks them, so
// every rank reaches the same verdict.
void check_tiling(Communicator& comm, const ParamLayout& layout,
                  const std::vector<CheckpointBuffer>& buffers) {
  // Per rank: its layout's total (the ranks must agree on the model), then begin and
  // end of each kind. Element counts are far below 2^53, so doubles hold them exactly.
  const size_t per_rank = 1 + 2 * buffers.size();
  std::vector<double> mine;
  mine.reserve(per_rank);
  mine.push_back(double(layout.total()));
  for (const CheckpointBuffer& b : buffers) {
    mine.push_back(double(b.begin));
    mine.push_back(double(b.end));
  }
  std::vector<double> all(per_rank * size_t(comm.size()));
  comm.all_gather(mine.data(), all.data(), per_rank, DType::F64);

  agree(comm, attempt([&] {
    const auto at = [&](int r, size_t i) { return int64_t(all[size_t(r) * per_rank + i]); };
    for (int r = 0; r < comm.size(); ++r)
      if (at(r, 0) != layout.total())
        throw std::invalid_argument("save_checkpoint_sharded: rank " + std::to_string(r) +
                                    "'s layout has " + std::to_string(at(r, 0)) +
                                    " elements but rank " + std::to_string(comm.rank()) + "'s has " +
                                    std::to_string(layout.total()) + "; every rank must save the same model");
    for (size_t k = 0; k < buffers.size(); ++k) {
      // (begin, end, rank) of the non-empty slices, in file order.
      std::vector<std::tuple<int64_t, int64_t, int>> slices;
      std::string listing;
      for (int r = 0; r < comm.size(); ++r) {
        const int64_t begin = at(r, 1 + 2 * k), end = at(r, 2 + 2 * k);
        listing += (r ? ", rank " : "rank ") + std::to_string(r) + " " + slice_text(begin, end);
        if (end > begin) slices.emplace_back(begin, end, r);
      }
      std::sort(slices.begin(), slices.end());
      int64_t covered = 0;  // [0, covered) is written exactly once so far
      for (const auto& [begin, end, r] : slices) {
        if (begin != covered)
          throw std::invalid_argument(
              "save_checkpoint_sharded: the slices of '" + buffers[k].kind + "' do not tile [0, " +
              std::to_string(layout.total()) + "): " +
              (begin > covered ? "nobody holds " + slice_text(covered, begin)
                               : "rank " + std::to_string(r) + " overlaps " + slice_text(begin, covered)) +
              " (" + listing + ")");
        covered = end;
      }
      if (covered != layout.total())
        throw std::invalid_argument("save_checkpoint_sharded: the slices of '" + buffers[k].kind +
                                    "' do not tile [0, " + std::to_string(layout.total()) +
                                    "): nobody holds " + slice_text(covered, layout.total()) + " (" +
                                    listing + ")");
    }
  }));
}


}  // namespace gpt::checkpoint_detail
