// One rank's view of a process group: the collectives the engine needs on
// at::Tensor, with the same interface whatever carries them (Gloo for CPU
// tensors, NCCL for CUDA tensors, or nothing at all for a single rank).
//
// Every public collective is safe against the multi-rank hangs seen in the
// reference implementation:
//  - shapes, dtypes, roots and devices are exchanged before the data, so a
//    disagreement raises the same h3::Error on every rank instead of a rank
//    leaving early (or a transport reading garbage);
//  - every wait is bounded by timeout(): a rank that never joins gives an
//    h3::Error(kDistributed) naming this rank and the operation;
//  - a failure posted by a peer (report_failure) ends the wait at once with
//    h3::Error(kDistributed, "rank R failed: <message>").
// After any failure the group is unusable: the transport's state is out of
// step, so every later collective throws the first error again.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace h3::dist {

enum class ReduceOp { kSum, kMax };

// A failure some rank reported to the group (report_failure).
struct PeerFailure {
  int rank = -1;
  std::string message;
  // How many transport collectives that rank had completed when it failed:
  // a peer still waiting in a collective the failing rank completed keeps
  // waiting (its data is on the way), one waiting in a later one gives up.
  int64_t completed = 0;
};

class Group {  // one rank's view of its process group; used from one thread at a time
 public:
  virtual ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The device the group's transport runs on (CPU for Gloo, a CUDA device for NCCL). An NCCL
  // group also takes CPU tensors: they are staged through its device (a copy each way), so
  // code that keeps its tensors on the CPU (the VAE's tile gather) runs unchanged on it.
  c10::Device device() const { return device_; }
  // "gloo", "nccl" or "single".
  virtual const char* backend() const = 0;

  // In place; every rank passes a tensor of the same shape and dtype.
  void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum);
  // Shapes may differ per rank (empty tensors included); dtypes must agree.
  // Returns one tensor per rank, in rank order (views into one received buffer).
  // `reuse`, when given, is that buffer kept by the caller between the calls of a
  // loop: the parts land in it when it is large enough (else it is replaced by a
  // bigger one), so a loop of large gathers stops paying for fresh pages, which
  // cost more than the copy. The previous call's parts are then overwritten.
  std::vector<at::Tensor> all_gather(const at::Tensor& t, at::Tensor* reuse = nullptr);
  // Rank r's parts[j] goes to rank j; returns, in rank order, the part each rank sent to this
  // one. Every part of every rank has one dtype and the same dimensions after the first; the
  // first may differ (0 included), so ranks that exchange nothing with each other send empty
  // parts (this is how a subset of the ranks, e.g. one sequence-parallel group of a 2-D layout,
  // exchanges within the world). The counts travel first, in one small all_gather, so that a
  // disagreement raises the same error on every rank.
  std::vector<at::Tensor> all_to_all(const std::vector<at::Tensor>& parts);
  // In place: every rank passes a tensor of the same shape and dtype and the same root.
  void broadcast(at::Tensor& t, int root);
  void barrier();
  int64_t all_reduce_int(int64_t v, ReduceOp op = ReduceOp::kSum);
  int64_t broadcast_int(int64_t v, int root);
  std::string broadcast_string(const std::string& s, int root);

  // Rank `owner` runs `work`, code of the caller's that may take any time (a
  // chunk sink waiting for a slow consumer, a paused pipeline), while the
  // other ranks wait for it here instead of in their next collective, where
  // timeout() would end the wait. Every rank calls it at the same point. The
  // owner shows that it is alive from a thread of its own while `work` runs;
  // a peer waits without a limit while it does, gives up (kDistributed, and
  // posts its failure) when the owner shows no sign of life for timeout(),
  // and stops at once on a failure a rank posted. What `work` throws reaches
  // the owner's caller after its peers were released. `what` names the wait
  // in errors. At size 1 it just runs `work`. On a thread that installed an
  // OwnerTurns (dist/owner_turns.h), that runs it instead.
  void run_on_owner(int owner, const std::function<void()>& work, const char* what);

  // Shows this rank alive to peers waiting for it in run_on_owner, from a thread of its own,
  // while the returned object lives, as run_on_owner's owner does while its work runs: for an
  // owner whose peers wait for it while it works *between* its run_on_owner calls (the engine's
  // rank 0 while requests take turns at its ranks, engine/scheduler/session.h). Null at size 1.
  class AliveBeat {
   public:
    explicit AliveBeat(Group& g);
    ~AliveBeat();
    AliveBeat(const AliveBeat&) = delete;
    AliveBeat& operator=(const AliveBeat&) = delete;

   private:
    static void sign(Group& g);
    Group& g_;
    std::mutex m_;
    std::condition_variable cv_;
    bool finished_ = false;
    std::thread thread_;
  };
  std::unique_ptr<AliveBeat> show_alive();

  // Tells the peers that this rank failed with `message`: their pending and
  // later collectives end with "rank <this> failed: <message>" instead of
  // waiting for the timeout. The first failure reported in a group wins.
  // Never throws. run_threads calls it when a rank's function throws; a
  // process of a TCP world calls it before it gives up.
  void report_failure(const std::string& message);
  // The first failure any rank reported, if one was (does not block).
  std::optional<PeerFailure> peer_failure();
  // True once a collective of this group failed or timed out.
  bool broken() const { return !broken_.empty(); }
  // Payload bytes this rank has sent to other ranks through all_reduce, all_gather, all_to_all
  // and broadcast (their metadata left out), as an ideal transport moves them: an all_reduce
  // 2 (n - 1) / n of the tensor (a ring), an all_gather its part to each of the n - 1 peers, an
  // all_to_all its parts for the other ranks, a broadcast's root its tensor to n - 1 peers.
  // What `h3 bench dit` reports per step; the transports' own overheads are not counted.
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  Group(int rank, int size, std::chrono::milliseconds timeout, c10::Device device);

  // Whether tensors on `d` can travel through this group.
  virtual bool accepts_device(const c10::Device& d) const { return d.type() == device_.type(); }

  // Transport primitives on contiguous tensors on device(); `what` names the
  // public operation for error messages. They throw h3::Error(kDistributed).
  virtual void raw_all_reduce(at::Tensor& t, ReduceOp op, const char* what) = 0;
  // `out` is flat, size() * in.numel() elements of in's dtype; rank r's part at r * in.numel().
  virtual void raw_all_gather(const at::Tensor& in, at::Tensor& out, const char* what) = 0;
  // Backends that can move parts of different sizes straight from the callers' tensors (shared
  // memory) say so and implement raw_all_gather_uneven: rank r's contiguous `in` (its byte
  // count is offsets[r + 1] - offsets[r]) lands at byte offsets[r] of the flat byte tensor `out`.
  // all_gather then skips the zero-padded staging copy the equal-size transports need.
  virtual bool gathers_uneven() const { return false; }
  virtual void raw_all_gather_uneven(const at::Tensor& in, at::Tensor& out,
                                     const std::vector<int64_t>& offsets, const char* what);
  // `in`: this rank's parts back to back, counts[rank()][j] elements for rank j; `out`: what each
  // rank j sends here, counts[j][rank()] elements, back to back in rank order. counts is
  // [src][dst] in elements of in's dtype, the same on every rank; both tensors flat, contiguous.
  virtual void raw_all_to_all(const at::Tensor& in, at::Tensor& out,
                              const std::vector<std::vector<int64_t>>& counts, const char* what) = 0;
  virtual void raw_broadcast(at::Tensor& t, int root, const char* what) = 0;
  // The failure board shared by the ranks (the rendezvous store for Gloo and NCCL).
  virtual void post_failure(const PeerFailure& f) = 0;
  virtual std::optional<PeerFailure> read_failure() = 0;
  // The owner-wait marks of run_on_owner, in the same store; owner_alive() is
  // called from the owner's heartbeat thread, so it must be thread-safe.
  virtual void owner_alive() = 0;
  virtual int64_t owner_alive_count() = 0;
  virtual void owner_done(int64_t seq) = 0;
  virtual bool owner_wait_done(int64_t seq, std::chrono::milliseconds slice) = 0;

  // Backends count each transport collective that completed on this rank.
  void note_completed() { ++completed_; }
  // Whether a posted failure means the rank will never join the collective
  // this rank is waiting in (it failed before completing it).
  bool never_joins(const PeerFailure& f) const { return f.rank != rank_ && f.completed <= completed_; }

  // Marks the group unusable and throws h3::Error(kDistributed, message).
  [[noreturn]] void fail(const std::string& message);
  // Throws the first error again if the group is broken, or the peer error
  // if a peer reported a failure.
  void check_usable(const char* what);

 private:
  struct TensorMeta;
  std::vector<TensorMeta> exchange_meta(const at::Tensor& t, int64_t root, const char* what);
  // Every collective opens with one all_gather of a row of the same length whatever the
  // collective (its last entry names the collective): ranks out of step meet at an opening,
  // which every backend carries alike, and all fail there naming each rank's collective, where
  // Gloo would otherwise abort the process on payloads of different sizes. Returns every rank's
  // row (`row` padded), rank after rank.
  std::vector<int64_t> open(std::vector<int64_t> row, const char* what);

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  c10::Device device_;
  std::string broken_;
  int64_t completed_ = 0;
  int64_t bytes_sent_ = 0;
  int64_t owner_calls_ = 0;  // run_on_owner calls so far: the same count on every rank
};

// Size 1: every collective is local (no Gloo), on tensors of any device.
std::unique_ptr<Group> make_single_group();

}  // namespace h3::dist
