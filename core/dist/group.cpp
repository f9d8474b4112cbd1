// The backend-independent half of Group: metadata exchange, agreement on
// shapes/dtypes/roots, dtype handling and the broken-group rule. The backends
// only move contiguous buffers (raw_*).
#include "dist/group.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <iterator>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "common/shape.h"
#include "dist/owner_turns.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

constexpr int64_t kMaxDims = 8;
constexpr int64_t kNoRoot = -1;  // all_reduce and all_gather have no root
// Layout of one rank's metadata row: status, dtype, root, numel, ndim, dims...
constexpr int64_t kMetaLen = 5 + kMaxDims;

enum MetaStatus : int64_t {
  kMetaOk = 0,
  kMetaWrongDevice = 1,
  kMetaTooManyDims = 2,
  kMetaWrongPartCount = 3,  // all_to_all: not one part per rank
  kMetaMixedParts = 4,      // all_to_all: parts of different dtypes or trailing dims
};

// The collectives, as an opening row names them (its last entry).
constexpr const char* kCollectives[] = {"all_reduce",     "all_gather",    "broadcast", "all_to_all",
                                        "all_reduce_int", "broadcast_int", "barrier"};

int64_t collective_code(const char* what) {
  for (size_t i = 0; i < std::size(kCollectives); ++i) {
    if (std::string_view(what) == kCollectives[i]) return static_cast<int64_t>(i) + 1;
  }
  return 0;
}

std::string collective_name(int64_t code) {
  return code >= 1 && code <= static_cast<int64_t>(std::size(kCollectives))
             ? kCollectives[code - 1]
             : "an unknown collective (" + std::to_string(code) + ")";
}

// Dtypes that Gloo reduces natively; the others are reduced in float32 (half
// precision) or refused (bool, complex) by every rank alike.
bool reducible_natively(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
    case at::kDouble:
    case at::kInt:
    case at::kLong:
    case at::kChar:
    case at::kByte: return true;
    default: return false;
  }
}

}  // namespace

struct Group::TensorMeta {
  int64_t status = kMetaOk;
  at::ScalarType dtype = at::kFloat;
  int64_t root = 0;
  int64_t numel = 0;
  std::vector<int64_t> shape;
};

Group::Group(int rank, int size, std::chrono::milliseconds timeout, c10::Device device)
    : rank_(rank), size_(size), timeout_(timeout), device_(device) {}

Group::~Group() = default;

void Group::fail(const std::string& message) {
  if (broken_.empty()) broken_ = message;
  throw Error(ErrorKind::kDistributed, message);
}

void Group::check_usable(const char* what) {
  if (!broken_.empty()) {
    throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank_) + ": cannot run " + what +
                                             ": the group failed earlier (" + broken_ + ")");
  }
  // A peer that already failed will not join. Checking before (never after)
  // a collective keeps agreed errors identical: no rank can finish a
  // collective, fail and post before every rank has passed this check.
  if (size_ > 1) {
    if (auto f = peer_failure(); f && f->rank != rank_) {
      fail("rank " + std::to_string(f->rank) + " failed: " + f->message);
    }
  }
}

void Group::report_failure(const std::string& message) {
  if (broken_.empty()) broken_ = "this rank failed: " + message;
  try {
    post_failure(PeerFailure{rank_, message, completed_});
  } catch (...) {
    // The board is unreachable (a dead store server): peers then find out
    // through the closed connections or their timeout.
  }
}

// The owner's signs of life while its peers wait for it (run_on_owner): one at once (a peer that
// started waiting long ago must not give up now), then several per timeout from a thread of its
// own, and often enough that a short timeout still sees some.
Group::AliveBeat::AliveBeat(Group& g) : g_(g) {
  const auto beat = std::clamp<std::chrono::milliseconds>(g.timeout_ / 4, std::chrono::milliseconds(5),
                                                          std::chrono::milliseconds(500));
  sign(g_);
  thread_ = std::thread([this, beat] {
    std::unique_lock<std::mutex> lk(m_);
    while (!cv_.wait_for(lk, beat, [&] { return finished_; })) sign(g_);
  });
}

Group::AliveBeat::~AliveBeat() {
  {
    std::lock_guard<std::mutex> lk(m_);
    finished_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Group::AliveBeat::sign(Group& g) {
  try {
    g.owner_alive();
  } catch (...) {
    // The store is unreachable: the peers will say so when they give up.
  }
}

std::unique_ptr<Group::AliveBeat> Group::show_alive() {
  if (size_ == 1) return nullptr;
  return std::make_unique<AliveBeat>(*this);
}

void Group::run_on_owner(int owner, const std::function<void()>& work, const char* what) {
  // A session taking turns at this rank (dist/owner_turns.h) gives the rank to another session
  // while the owner works, instead of waiting here.
  if (OwnerTurns* turns = current_owner_turns()) {
    turns->run(*this, owner, work, what);
    return;
  }
  if (size_ == 1) {
    work();
    return;
  }
  if (owner < 0 || owner >= size_) {
    throw Error(ErrorKind::kInvalidArgument, std::string(what) + ": owner rank " + std::to_string(owner) +
                                                 " is not in the group of " + std::to_string(size_));
  }
  check_usable(what);
  const int64_t seq = ++owner_calls_;
  if (rank_ == owner) {
    std::exception_ptr err;
    {
      const AliveBeat heartbeat(*this);
      try {
        work();
      } catch (...) {
        err = std::current_exception();
      }
    }
    try {
      owner_done(seq);
    } catch (const std::exception& e) {
      report_failure(std::string(what) + ": could not release the peers: " + e.what());
      fail("rank " + std::to_string(rank_) + ": " + what + ": could not release the peers: " + e.what());
    }
    if (err) std::rethrow_exception(err);
    return;
  }
  // A peer: wait for the owner while it shows that it is alive.
  const std::chrono::milliseconds slice(20);
  int64_t last_alive = -1;
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  for (;;) {
    try {
      if (owner_wait_done(seq, slice)) return;
    } catch (const std::exception& e) {
      report_failure(std::string(what) + ": " + e.what());
      fail("rank " + std::to_string(rank_) + ": " + what + ": the store failed: " + e.what());
    }
    if (auto f = peer_failure(); f && f->rank != rank_) {
      fail("rank " + std::to_string(f->rank) + " failed: " + f->message);
    }
    int64_t alive = last_alive;
    try {
      alive = owner_alive_count();
    } catch (const Error& e) {
      // A mark that is not a count: refused at once rather than waited on as no sign of life.
      const std::string message = "rank " + std::to_string(rank_) + ": " + what + ": " + e.what();
      report_failure(message);
      fail(message);
    } catch (...) {
      // The store unreachable: counted as no sign of life.
    }
    const auto now = std::chrono::steady_clock::now();
    if (alive != last_alive) {
      last_alive = alive;
      deadline = now + timeout_;
    } else if (now >= deadline) {
      const std::string message = "rank " + std::to_string(rank_) + ": " + what + " timed out after " +
                                  std::to_string(timeout_.count()) + " ms: rank " + std::to_string(owner) +
                                  " showed no sign of life (group of " + std::to_string(size_) + ")";
      report_failure(message);
      fail(message);
    }
  }
}

std::optional<PeerFailure> Group::peer_failure() {
  try {
    return read_failure();
  } catch (...) {
    return std::nullopt;
  }
}

std::vector<int64_t> Group::open(std::vector<int64_t> row, const char* what) {
  // The longest row: a tensor's metadata, or all_to_all's head and one count per rank.
  const size_t len = static_cast<size_t>(std::max<int64_t>(kMetaLen, 3 + kMaxDims + size_)) + 1;
  row.resize(len, 0);
  row.back() = collective_code(what);
  if (size_ == 1) return row;
  at::Tensor mine = at::tensor(row, at::kLong).to(device_);
  at::Tensor all = at::empty({size_ * static_cast<int64_t>(len)}, mine.options());
  raw_all_gather(mine, all, what);
  at::Tensor host = all.cpu();
  const int64_t* p = host.data_ptr<int64_t>();
  std::vector<int64_t> rows(p, p + size_ * static_cast<int64_t>(len));
  bool same = true;
  for (int r = 1; r < size_; ++r) same = same && rows[(r + 1) * len - 1] == rows[len - 1];
  if (!same) {
    std::string who;
    for (int r = 0; r < size_; ++r) {
      who += (r ? ", rank " : "rank ") + std::to_string(r) + " is in " +
             collective_name(rows[(r + 1) * len - 1]);
    }
    fail("rank " + std::to_string(rank_) + ": " + what + ": the ranks are out of step: " + who +
         "; a rank skipped, added or reordered a collective (every rank must run the same collectives in the "
         "same order)");
  }
  return rows;
}

// Every rank learns every rank's shape, dtype, device status and root in one
// small all_gather, so each check below raises the same error on every rank.
std::vector<Group::TensorMeta> Group::exchange_meta(const at::Tensor& t, int64_t root, const char* what) {
  std::vector<int64_t> row(kMetaLen, 0);
  if (!accepts_device(t.device())) row[0] = kMetaWrongDevice;
  if (t.dim() > kMaxDims) row[0] = kMetaTooManyDims;
  row[1] = static_cast<int64_t>(t.scalar_type());
  row[2] = root;
  row[3] = t.numel();
  row[4] = t.dim();
  for (int64_t d = 0; d < std::min<int64_t>(t.dim(), kMaxDims); ++d) row[5 + d] = t.size(d);

  std::vector<TensorMeta> metas(size_);
  if (size_ == 1) {
    metas[0] = TensorMeta{row[0], t.scalar_type(), root, t.numel(), t.sizes().vec()};
  } else {
    const std::vector<int64_t> rows = open(row, what);
    const size_t len = rows.size() / static_cast<size_t>(size_);
    for (int r = 0; r < size_; ++r) {
      const int64_t* m = rows.data() + r * len;
      TensorMeta& meta = metas[r];
      meta.status = m[0];
      meta.dtype = static_cast<at::ScalarType>(m[1]);
      meta.root = m[2];
      meta.numel = m[3];
      meta.shape.assign(m + 5, m + 5 + std::min<int64_t>(m[4], kMaxDims));
    }
  }

  const std::string op(what);
  for (int r = 0; r < size_; ++r) {
    if (metas[r].status == kMetaWrongDevice) {
      fail(op + ": rank " + std::to_string(r) + " passed a tensor on the wrong device; this " + backend() +
           " group needs tensors on " + device_.str());
    }
    if (metas[r].status == kMetaTooManyDims) {
      fail(op + ": rank " + std::to_string(r) + " passed a tensor of more than " + std::to_string(kMaxDims) +
           " dimensions; reshape it first");
    }
    if (metas[r].dtype != metas[0].dtype) {
      fail(op + ": ranks disagree on the dtype: rank 0 passes " + c10::toString(metas[0].dtype) + ", rank " +
           std::to_string(r) + " passes " + c10::toString(metas[r].dtype));
    }
    if (metas[r].root != metas[0].root) {
      fail(op + ": ranks disagree on the root: rank 0 names " + std::to_string(metas[0].root) + ", rank " +
           std::to_string(r) + " names " + std::to_string(metas[r].root));
    }
  }
  if (root != kNoRoot && (root < 0 || root >= size_)) {
    fail(op + ": root " + std::to_string(root) + " is not a rank of this group of " + std::to_string(size_));
  }
  return metas;
}

void Group::all_reduce(at::Tensor& t, ReduceOp op) {
  check_usable("all_reduce");
  auto metas = exchange_meta(t, kNoRoot, "all_reduce");
  for (int r = 1; r < size_; ++r) {
    if (metas[r].shape != metas[0].shape) {
      fail("all_reduce: ranks disagree on the shape: rank 0 passes " + shape_string(metas[0].shape) +
           ", rank " + std::to_string(r) + " passes " + shape_string(metas[r].shape));
    }
  }
  const at::ScalarType dtype = metas[0].dtype;
  if (dtype == at::kBool || at::isComplexType(dtype)) {
    fail(std::string("all_reduce: dtype ") + c10::toString(dtype) + " cannot be reduced; convert it first");
  }
  if (size_ == 1 || t.numel() == 0) return;
  // Half-precision sums are carried out in float32 (also more accurate), then rounded once.
  // A CPU tensor given to a CUDA group travels through the group's device (staged).
  at::Tensor work = t.to(device_, reducible_natively(dtype) ? dtype : at::kFloat).contiguous();
  bytes_sent_ += 2 * (size_ - 1) * static_cast<int64_t>(t.nbytes()) / size_;
  raw_all_reduce(work, op, "all_reduce");
  if (!work.is_same(t)) t.copy_(work);
}

namespace {

// `bytes` bytes on `device`: the front of `*reuse` where it is large enough, else fresh
// (and kept in `*reuse` for the next call).
at::Tensor byte_buffer(int64_t bytes, const c10::Device& device, at::Tensor* reuse) {
  if (reuse && reuse->defined() && reuse->device() == device && reuse->scalar_type() == at::kByte &&
      reuse->numel() >= bytes) {
    return reuse->narrow(0, 0, bytes);
  }
  at::Tensor fresh = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  if (reuse) *reuse = fresh;
  return fresh;
}

}  // namespace

std::vector<at::Tensor> Group::all_gather(const at::Tensor& t, at::Tensor* reuse) {
  check_usable("all_gather");
  auto metas = exchange_meta(t, kNoRoot, "all_gather");
  const at::ScalarType dtype = metas[0].dtype;
  const int64_t item = static_cast<int64_t>(c10::elementSize(dtype));
  int64_t max_numel = 0;
  for (const auto& m : metas) max_numel = std::max(max_numel, m.numel);

  std::vector<at::Tensor> out;
  out.reserve(size_);
  if (size_ == 1) {
    out.push_back(t.clone(at::MemoryFormat::Contiguous));
    return out;
  }
  // The parts come back on the caller's device (a CPU tensor given to a CUDA group is staged).
  at::TensorOptions opts = at::TensorOptions().dtype(dtype).device(t.device());
  if (max_numel == 0) {
    for (const auto& m : metas) out.push_back(at::empty(m.shape, opts));
    return out;
  }
  bytes_sent_ += (size_ - 1) * t.numel() * item;
  if (gathers_uneven()) {
    std::vector<int64_t> offsets(static_cast<size_t>(size_) + 1, 0);
    for (int r = 0; r < size_; ++r) offsets[r + 1] = offsets[r] + metas[r].numel * item;
    at::Tensor all = byte_buffer(offsets.back(), device_, reuse);
    raw_all_gather_uneven(t.contiguous(), all, offsets, "all_gather");
    for (int r = 0; r < size_; ++r) {
      out.push_back(metas[r].numel == 0
                        ? at::empty(metas[r].shape, opts)
                        : all.narrow(0, offsets[r], metas[r].numel * item).view(dtype).view(metas[r].shape));
    }
    return out;
  }
  // Every rank sends max_numel elements (its own, zero-padded) as raw bytes,
  // so any dtype travels and the transport sees equal sizes everywhere.
  // Slots are padded to whole 4-byte words so that backends may move them as int32.
  const int64_t slot = (max_numel * item + 3) / 4 * 4;
  at::Tensor mine = at::zeros({slot}, at::TensorOptions().dtype(at::kByte).device(device_));
  if (t.numel() > 0) {
    mine.narrow(0, 0, t.numel() * item).copy_(t.contiguous().view({-1}).view(at::kByte));
  }
  at::Tensor all = byte_buffer(size_ * slot, device_, reuse);
  raw_all_gather(mine, all, "all_gather");
  all = all.to(t.device());
  for (int r = 0; r < size_; ++r) {
    at::Tensor bytes = all.narrow(0, r * slot, metas[r].numel * item);
    out.push_back(metas[r].numel == 0 ? at::empty(metas[r].shape, opts)
                                      : bytes.view(dtype).view(metas[r].shape));
  }
  return out;
}

std::vector<at::Tensor> Group::all_to_all(const std::vector<at::Tensor>& parts) {
  check_usable("all_to_all");
  const std::string op = "all_to_all";
  // Each rank's row: status, dtype, the trailing dims, then its first-dim count for every rank.
  constexpr int64_t kHead = 3 + kMaxDims;
  std::vector<int64_t> row(static_cast<size_t>(kHead + size_), 0);
  if (static_cast<int>(parts.size()) != size_) row[0] = kMetaWrongPartCount;
  at::ScalarType dtype = parts.empty() ? at::kFloat : parts[0].scalar_type();
  std::vector<int64_t> trailing = parts.empty() ? std::vector<int64_t>{} : parts[0].sizes().vec();
  if (!trailing.empty()) trailing.erase(trailing.begin());
  for (size_t j = 0; j < parts.size() && row[0] == 0; ++j) {
    const auto& p = parts[j];
    if (!accepts_device(p.device()))
      row[0] = kMetaWrongDevice;
    else if (p.dim() < 1 || p.dim() > kMaxDims)
      row[0] = kMetaTooManyDims;
    else if (p.scalar_type() != dtype ||
             std::vector<int64_t>(p.sizes().begin() + 1, p.sizes().end()) != trailing)
      row[0] = kMetaMixedParts;
    else
      row[static_cast<size_t>(kHead + static_cast<int64_t>(j))] = p.size(0);
  }
  row[1] = static_cast<int64_t>(dtype);
  row[2] = static_cast<int64_t>(trailing.size());
  for (size_t d = 0; d < trailing.size() && d < static_cast<size_t>(kMaxDims); ++d) row[3 + d] = trailing[d];
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(size_));
  if (size_ == 1) {
    rows[0] = row;
  } else {
    const std::vector<int64_t> all = open(row, "all_to_all");
    const size_t len = all.size() / static_cast<size_t>(size_);
    for (int r = 0; r < size_; ++r) rows[r].assign(all.begin() + r * len, all.begin() + r * len + row.size());
  }
  for (int r = 0; r < size_; ++r) {
    const auto& m = rows[r];
    const std::string who = "rank " + std::to_string(r);
    if (m[0] == kMetaWrongPartCount)
      fail(op + ": " + who + " passed a part count other than the group's size");
    if (m[0] == kMetaWrongDevice)
      fail(op + ": " + who + " passed a part on the wrong device (" + device_.str() + ")");
    if (m[0] == kMetaTooManyDims) fail(op + ": " + who + " passed a part of 0 or more than 8 dimensions");
    if (m[0] == kMetaMixedParts) fail(op + ": " + who + "'s parts differ in dtype or trailing dimensions");
    if (!std::equal(m.begin() + 1, m.begin() + kHead, rows[0].begin() + 1)) {
      fail(op + ": ranks disagree on the parts' dtype or trailing dimensions (rank 0 and rank " +
           std::to_string(r) + ")");
    }
  }
  int64_t row_elems = 1;
  for (int64_t d : trailing) row_elems *= d;
  std::vector<std::vector<int64_t>> counts(static_cast<size_t>(size_), std::vector<int64_t>(size_));
  int64_t recv = 0;
  for (int s = 0; s < size_; ++s) {
    for (int d = 0; d < size_; ++d) counts[s][d] = rows[s][static_cast<size_t>(kHead + d)] * row_elems;
  }
  for (int s = 0; s < size_; ++s) recv += counts[s][rank_];
  for (int d = 0; d < size_; ++d) {
    if (d != rank_) bytes_sent_ += counts[rank_][d] * static_cast<int64_t>(c10::elementSize(dtype));
  }
  const auto opts = at::TensorOptions().dtype(dtype).device(parts[0].device());
  std::vector<at::Tensor> flat;
  for (const auto& p : parts) flat.push_back(p.reshape({-1}));
  at::Tensor in = at::cat(flat).to(device_);
  at::Tensor out = at::empty({recv}, in.options());
  // Every rank takes part even with nothing to send or receive: the transports' collectives
  // (and the group's count of completed ones) stay in step.
  raw_all_to_all(in, out, counts, "all_to_all");
  out = out.to(opts.device());
  std::vector<at::Tensor> result;
  int64_t at = 0;
  for (int s = 0; s < size_; ++s) {
    std::vector<int64_t> shape{rows[s][static_cast<size_t>(kHead + rank_)]};
    shape.insert(shape.end(), trailing.begin(), trailing.end());
    result.push_back(out.narrow(0, at, counts[s][rank_]).view(shape));
    at += counts[s][rank_];
  }
  return result;
}

void Group::raw_all_gather_uneven(const at::Tensor&, at::Tensor&, const std::vector<int64_t>&,
                                  const char* what) {
  throw Error(ErrorKind::kInternal,
              std::string(what) + ": the " + backend() + " backend cannot gather parts of different sizes");
}

void Group::broadcast(at::Tensor& t, int root) {
  check_usable("broadcast");
  auto metas = exchange_meta(t, root, "broadcast");
  for (int r = 0; r < size_; ++r) {
    if (metas[r].shape != metas[root].shape) {
      fail("broadcast: rank " + std::to_string(r) + " passes shape " + shape_string(metas[r].shape) +
           " but the root, rank " + std::to_string(root) + ", passes " + shape_string(metas[root].shape));
    }
  }
  if (size_ == 1 || t.numel() == 0) return;
  at::Tensor work = t.to(device_).contiguous();
  at::Tensor bytes = work.view({-1}).view(at::kByte);
  if (rank_ == root) bytes_sent_ += (size_ - 1) * static_cast<int64_t>(bytes.numel());
  raw_broadcast(bytes, root, "broadcast");
  if (!work.is_same(t)) t.copy_(work);
}

// The barrier is an opening alone: no rank's gather ends before every rank has given its row.
void Group::barrier() {
  check_usable("barrier");
  if (size_ > 1) open({}, "barrier");
}

// The integer collectives are an opening alone too: each rank's value travels in its row.
int64_t Group::all_reduce_int(int64_t v, ReduceOp op) {
  check_usable("all_reduce_int");
  if (size_ == 1) return v;
  const std::vector<int64_t> rows = open({v}, "all_reduce_int");
  const size_t len = rows.size() / static_cast<size_t>(size_);
  int64_t out = rows[0];
  for (int r = 1; r < size_; ++r) {
    const int64_t x = rows[r * len];
    out = op == ReduceOp::kSum ? out + x : std::max(out, x);
  }
  return out;
}

// Carried by an opening of (root, value) so that a rank naming another root is an agreed error
// rather than a transport-level mismatch.
int64_t Group::broadcast_int(int64_t v, int root) {
  check_usable("broadcast_int");
  const std::vector<int64_t> rows = open({root, v}, "broadcast_int");
  const size_t len = rows.size() / static_cast<size_t>(size_);
  const int64_t* p = rows.data();
  for (int r = 0; r < size_; ++r) {
    if (p[r * len] != p[0]) {
      fail("broadcast_int: ranks disagree on the root: rank 0 names " + std::to_string(p[0]) + ", rank " +
           std::to_string(r) + " names " + std::to_string(p[r * len]));
    }
  }
  if (root < 0 || root >= size_) {
    fail("broadcast_int: root " + std::to_string(root) + " is not a rank of this group of " +
         std::to_string(size_));
  }
  return p[root * len + 1];
}

std::string Group::broadcast_string(const std::string& s, int root) {
  check_usable("broadcast_string");
  const int64_t len = broadcast_int(static_cast<int64_t>(s.size()), root);
  if (size_ == 1) return s;
  if (len == 0) return std::string();
  at::Tensor bytes = at::empty({len}, at::kByte);
  if (rank_ == root) std::memcpy(bytes.data_ptr<uint8_t>(), s.data(), s.size());
  bytes = bytes.to(device_);
  raw_broadcast(bytes, root, "broadcast_string");
  at::Tensor host = bytes.cpu();
  return std::string(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(len));
}

namespace {

// Size 1: every collective is the identity, so nothing is ever sent.
class SingleGroup final : public Group {
 public:
  SingleGroup() : Group(0, 1, std::chrono::seconds(60), c10::Device(c10::kCPU)) {}
  const char* backend() const override { return "single"; }

 protected:
  bool accepts_device(const c10::Device&) const override { return true; }  // nothing leaves the tensor
  void raw_all_reduce(at::Tensor&, ReduceOp, const char*) override {}
  void raw_all_gather(const at::Tensor& in, at::Tensor& out, const char*) override {
    out.copy_(in.view({-1}));
  }
  void raw_all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<std::vector<int64_t>>&,
                      const char*) override {
    out.copy_(in);
  }
  void raw_broadcast(at::Tensor&, int, const char*) override {}
  void post_failure(const PeerFailure&) override {}
  std::optional<PeerFailure> read_failure() override { return std::nullopt; }
  // run_on_owner never waits at size 1.
  void owner_alive() override {}
  int64_t owner_alive_count() override { return 0; }
  void owner_done(int64_t) override {}
  bool owner_wait_done(int64_t, std::chrono::milliseconds) override { return true; }
};

}  // namespace

std::unique_ptr<Group> make_single_group() {
  return std::make_unique<SingleGroup>();
}

}  // namespace h3::dist
