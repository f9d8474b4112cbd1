// The memory the requests in flight take beside the weights they share (docs/engine.md, "Memory
// guard"): the weights are loaded once and counted once (they are not in the budget at all);
// each request reserves its own estimate (engine/planning/memory_guard.h: its KV cache, latents, DiT
// activations and decode) while it runs. A request that would not fit beside the running ones is
// refused at its start, naming the numbers, and the running ones go on.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace h3 {

class StreamBudget {
 public:
  // `max_memory`: the most all requests in flight may take together, in bytes; 0: what
  // `available()` says (the machine's or cgroup's available memory) when the first request of a
  // busy spell starts, kept as the budget while any request runs (what the running ones take is
  // then no longer available, but theirs already).
  StreamBudget(int64_t max_memory, std::function<int64_t()> available);

  // A request's hold on its share; gives it back when destroyed.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& o) noexcept;
    Reservation& operator=(Reservation&& o) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();
    int64_t bytes() const { return bytes_; }

   private:
    friend class StreamBudget;
    Reservation(StreamBudget* b, int64_t bytes) : budget_(b), bytes_(bytes) {}
    StreamBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Reserves `bytes` for the request described by `request` ("256x160, endless"), or throws
  // h3::Error(kOutOfMemory) with admission_refusal()'s message. With no budget known (max_memory
  // 0 and nothing available to read) every request is admitted.
  Reservation admit(int64_t bytes, const std::string& request);

  int running() const;
  int64_t reserved() const;

 private:
  void release(int64_t bytes);

  const int64_t max_memory_;
  const std::function<int64_t()> available_;
  mutable std::mutex m_;
  int running_ = 0;
  int64_t reserved_ = 0;
  int64_t measured_ = 0;  // max_memory 0: the budget of the current busy spell
};

// Why a request needing `need` bytes is refused beside `running` requests holding `held` of
// `budget` bytes (`given`: the max-memory limit; else what was available when the first of them
// started). Empty when it fits.
std::string admission_refusal(const std::string& request, int64_t need, int running, int64_t held,
                              int64_t budget, bool given);

}  // namespace h3
