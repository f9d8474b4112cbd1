// NCCL backend. The communicator is non-blocking (ncclConfig_t::blocking =
// 0) so that no NCCL call can hold this thread for ever: each collective is
// enqueued on the tensor device's current CUDA stream, then this thread polls
// the communicator's async error and an event recorded after the collective,
// and aborts the communicator on a peer's posted failure or on the timeout.
// The host thus waits for every collective (no overlap with later work):
// the price of a bounded wait. Untested: no build machine had a GPU and a
// CUDA LibTorch (see docs/distributed.md, "NCCL backend").
#include "dist/nccl_group.h"

#if H3_HAVE_CUDA && H3_TORCH_HAS_CUDA

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "dist/store_board.h"
#include "h3/error.h"

namespace h3::dist {

namespace {

constexpr const char* kUniqueIdKey = "h3/nccl_unique_id";
// How often a waiting rank reads the failure board (a store round trip).
constexpr std::chrono::milliseconds kBoardEvery{20};

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    default:
      throw Error(ErrorKind::kInternal, std::string("NCCL group: no NCCL type for ") + c10::toString(t));
  }
}

class NcclGroup final : public StoreBoardGroup {
 public:
  NcclGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
            std::chrono::milliseconds timeout, int cuda_device, bool processes)
      : StoreBoardGroup(store, rank, size, timeout,
                        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(cuda_device)), processes) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || cuda_device < 0 || cuda_device >= count) {
      throw Error(ErrorKind::kInvalidArgument, "rank " + std::to_string(rank) + ": CUDA device " +
                                                   std::to_string(cuda_device) + " does not exist (" +
                                                   std::to_string(count) + " visible)");
    }
    c10::cuda::CUDAGuard guard(device());
    ncclUniqueId id;
    if (rank == 0) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      const auto* p = reinterpret_cast<const uint8_t*>(&id);
      store->set(kUniqueIdKey, std::vector<uint8_t>(p, p + sizeof(id)));
    } else {
      std::vector<uint8_t> v;
      try {
        store->wait({kUniqueIdKey}, timeout);
        v = store->get(kUniqueIdKey);
      } catch (const std::exception& e) {
        std::string what = e.what();
        throw Error(ErrorKind::kDistributed,
                    "rank " + std::to_string(rank) +
                        ": no NCCL id from rank 0 within the timeout: " + what.substr(0, what.find('\n')));
      }
      if (v.size() != sizeof(id)) {
        throw Error(ErrorKind::kDistributed,
                    "rank " + std::to_string(rank) + ": the NCCL id in the store has " +
                        std::to_string(v.size()) + " bytes, expected " + std::to_string(sizeof(id)));
      }
      std::memcpy(&id, v.data(), sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) check(r, "ncclCommInitRankConfig");
    try {
      settle("connecting", nullptr, std::chrono::steady_clock::now() + timeout);
    } catch (...) {
      release(true);
      throw;
    }
    if (cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
      release(true);
      throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank) + ": cudaEventCreate failed");
    }
  }

  ~NcclGroup() override {
    store_depart(*store_, rank(), size(), timeout());
    c10::cuda::CUDAGuard guard(device());
    if (done_) cudaEventDestroy(done_);
    release(broken());
  }

  const char* backend() const override { return "nccl"; }

 protected:
  // Its own device, or the CPU (staged through the device by Group).
  bool accepts_device(const c10::Device& d) const override { return d == device() || d.is_cpu(); }

  void raw_all_reduce(at::Tensor& t, ReduceOp op, const char* what) override {
    run(what, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           nccl_type(t.scalar_type()), op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, s);
    });
  }

  void raw_all_gather(const at::Tensor& in, at::Tensor& out, const char* what) override {
    run(what, [&](cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(in.numel()),
                           nccl_type(in.scalar_type()), comm_, s);
    });
  }

  void raw_all_to_all(const at::Tensor& in, at::Tensor& out, const std::vector<std::vector<int64_t>>& counts,
                      const char* what) override {
    const size_t me = static_cast<size_t>(rank());
    const int64_t item = static_cast<int64_t>(in.element_size());
    run(what, [&](cudaStream_t s) {
      // Point-to-point pairs in one NCCL group call: the bytes each pair moves, no padding.
      ncclResult_t rc = ncclGroupStart();
      int64_t sent = 0, received = 0;
      for (size_t r = 0; r < counts.size() && rc == ncclSuccess; ++r) {
        const int64_t ns = counts[me][r], nr = counts[r][me];
        if (ns > 0) {
          rc = ncclSend(static_cast<const uint8_t*>(in.data_ptr()) + sent * item,
                        static_cast<size_t>(ns * item), ncclUint8, static_cast<int>(r), comm_, s);
        }
        if (rc == ncclSuccess && nr > 0) {
          rc = ncclRecv(static_cast<uint8_t*>(out.data_ptr()) + received * item,
                        static_cast<size_t>(nr * item), ncclUint8, static_cast<int>(r), comm_, s);
        }
        sent += ns;
        received += nr;
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc != ncclSuccess ? rc : end;
    });
  }

  void raw_broadcast(at::Tensor& t, int root, const char* what) override {
    run(what, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()),
                           nccl_type(t.scalar_type()), root, comm_, s);
    });
  }

 private:
  std::string here(const char* what) const { return "rank " + std::to_string(rank()) + ": " + what; }

  void check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    throw Error(ErrorKind::kDistributed,
                "rank " + std::to_string(rank()) + ": " + call + " failed: " + ncclGetErrorString(r));
  }

  // Aborting is the only way to make NCCL kernels that wait for an absent
  // peer return; a healthy communicator is finalised and destroyed.
  void release(bool abort) {
    if (!comm_) return;
    if (!abort) {
      ncclCommFinalize(comm_);
      const auto deadline = std::chrono::steady_clock::now() + timeout();
      ncclResult_t state = ncclInProgress;
      while (state == ncclInProgress && std::chrono::steady_clock::now() < deadline) {
        ncclCommGetAsyncError(comm_, &state);
        if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      abort = state != ncclSuccess;
    }
    if (abort) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    comm_ = nullptr;
  }

  [[noreturn]] void give_up(const std::string& message, bool post) {
    release(true);
    if (post) report_failure(message);
    fail(message);
  }

  template <typename F>
  void run(const char* what, F&& issue) {
    c10::cuda::CUDAGuard guard(device());
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream(device().index()).stream();
    ncclResult_t r = issue(stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      give_up(here(what) + " failed: " + ncclGetErrorString(r) + " (" + ncclGetLastError(comm_) + ")", true);
    }
    settle(what, nullptr, deadline);  // a non-blocking communicator may still be enqueuing
    if (cudaEventRecord(done_, stream) != cudaSuccess) give_up(here(what) + ": cudaEventRecord failed", true);
    settle(what, done_, deadline);
  }

  // Waits until the communicator is idle and, with `event`, the event has
  // completed; gives up on an NCCL/CUDA error, a peer's failure or the deadline.
  void settle(const char* what, cudaEvent_t event, std::chrono::steady_clock::time_point deadline) {
    auto next_board = std::chrono::steady_clock::now() + kBoardEvery;
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state != ncclSuccess && state != ncclInProgress) {
        give_up(here(what) + " failed: " + ncclGetErrorString(state) + " (" + ncclGetLastError(comm_) + ")",
                true);
      }
      if (state == ncclSuccess) {
        if (!event) return;
        cudaError_t e = cudaEventQuery(event);
        if (e == cudaSuccess) {
          note_completed();
          return;
        }
        if (e != cudaErrorNotReady) give_up(here(what) + " failed: " + cudaGetErrorString(e), true);
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_board) {
        next_board = now + kBoardEvery;
        if (auto f = peer_failure(); f && never_joins(*f)) {
          give_up("rank " + std::to_string(f->rank) + " failed: " + f->message, false);
        }
      }
      if (now >= deadline) {
        give_up(here(what) + " timed out after " + std::to_string(timeout().count()) +
                    " ms: a peer rank did not join it (group of " + std::to_string(size()) + ")",
                true);
      }
      // Spin briefly (collectives of a few KiB take microseconds), then sleep.
      if (spins < 1000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  ncclComm_t comm_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

}  // namespace

std::unique_ptr<Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout, int cuda_device, bool processes) {
  return std::make_unique<NcclGroup>(store, rank, size, timeout, cuda_device, processes);
}

}  // namespace h3::dist

#endif
