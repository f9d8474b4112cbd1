// The collectives of process ranks that share one host, through one POSIX shared-memory segment
// instead of Gloo's loopback TCP (docs/distributed.md, "Processes on one host"). On a 2-core VM a
// Gloo collective of the DiT's 4 MiB rows took 4-10 ms (the kernel's wake-ups and TCP copies
// between two busy processes), which made rank 0 and one `h3 worker` 1.4-2.2x slower than two
// thread ranks. Here each rank copies its part into its own slot, raises its count, and reads the
// others' slots once every count has reached it: memory speed, no thread of Gloo's in between.
//
// The Gloo group stays beside it (its failure board, departures and signs of life in the store,
// and its transport for what the segment does not carry). Internal to core/dist.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

namespace h3::dist {

class HostMemory {
 public:
  // Called while a rank waits for its peers, about every millisecond after the first: throws to
  // give up (the group's timeout, a peer's posted failure, a peer that is gone).
  using Check = std::function<void()>;

  // The segment of a group of `size` ranks, agreed through `store`: rank 0 makes it (unless
  // H3_DIST_SHM=0 in rank 0's environment), every rank maps it and says whether it could, and
  // all of them use it only if every rank could and all are in one pid namespace (processes of
  // other hosts, of another user or container cannot: then every rank gets null and the group
  // keeps Gloo). Throws h3::Error(kDistributed)
  // only when the store itself fails within `timeout`.
  static std::unique_ptr<HostMemory> join(c10d::Store& store, int rank, int size,
                                          std::chrono::milliseconds timeout);
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  // Contiguous CPU tensors; the same calls in the same order on every rank (Group's opening
  // checks that). Sums in rank order, as the thread ranks' MemoryGroup does, so that every rank
  // ends with the same bits.
  void all_reduce_sum(at::Tensor& t, const Check& check);
  void all_reduce_max(at::Tensor& t, const Check& check);
  // `out` flat, size * in.numel() elements; rank r's part at r * in.numel().
  void all_gather(const at::Tensor& in, at::Tensor& out, const Check& check);
  void broadcast(at::Tensor& t, int root, const Check& check);
  // Whether all_to_all can take these counts ([src][dst], elements of `item` bytes): every
  // rank's input fits one slot. The same answer on every rank (the counts are).
  bool carries_all_to_all(const std::vector<std::vector<int64_t>>& counts, int64_t item) const;
  void all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<std::vector<int64_t>>& counts,
                  const Check& check);

  // The ranks whose process has ended (killed, crashed or exited; a zombie counts as ended): a
  // process that dies closes no connection here, and when it is rank 0 the store its signs of
  // life are read from has gone with it. The ranks' processes share a pid namespace (join checks).
  std::vector<int> ended_ranks() const;

 private:
  HostMemory(int rank, int size, void* base, int64_t bytes, int64_t slot_bytes);
  struct Control;
  Control& control(int r) const;
  uint8_t* slot(int r) const;
  // One round: this rank's `bytes` of `mine` into its slot once every peer has read the last
  // round, then, once every rank has written this round, `read` on the slots, then marked read.
  void round(const uint8_t* mine, int64_t bytes, const std::function<void()>& read, const Check& check);
  void wait_all(bool posted, uint64_t at_least, const Check& check);
  void reduce(at::Tensor& t, bool sum, const Check& check);

  int rank_;
  int size_;
  void* base_;
  int64_t bytes_;
  int64_t slot_bytes_;
  uint64_t round_ = 0;  // rounds this rank has done: the same on every rank between collectives
};

}  // namespace h3::dist
