#include "dist/host_memory.h"

#include <ATen/ATen.h>
#include <c10/util/ParallelGuard.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "h3/error.h"

namespace h3::dist {

namespace {

constexpr uint64_t kMagic = 0x68332d73686d3031ULL;  // "h3-shm01"
// Each rank's slot: the DiT's per-block all_reduce of the medium model (2698 rows x 384, fp32,
// 4 MiB) fits one round; larger tensors go in several.
constexpr int64_t kSlotBytes = int64_t(16) << 20;
constexpr int64_t kLine = 64;

struct Header {
  uint64_t magic;
  uint64_t nonce;
  int64_t size;
  int64_t slot_bytes;
};

int64_t segment_bytes(int size) {
  return kLine + size * 3 * kLine + size * kSlotBytes;
}

// This process's pid namespace ("pid:[4026531836]"; "" where /proc does not say).
std::string pid_namespace() {
  char link[128] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof link - 1);
  return n > 0 ? std::string(link, static_cast<size_t>(n)) : std::string();
}

// Whether process `pid` runs (a zombie has ended: its parent has not reaped it yet).
bool process_runs(int64_t pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // cannot tell: alive
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

std::string key(const std::string& what) {
  return "h3-shm/" + what;
}

// The rounds a transfer of `bytes` takes through slots of `slot` bytes (one at least: a round
// with nothing in it still meets the peers).
int64_t rounds_for(int64_t bytes, int64_t slot) {
  return std::max<int64_t>(1, (bytes + slot - 1) / slot);
}

}  // namespace

// A rank's two counts, each on a cache line of its own (the peers poll them): the rounds it has
// written to its slot, and the rounds whose slots it has read.
struct HostMemory::Control {
  alignas(kLine) std::atomic<uint64_t> posted;
  alignas(kLine) std::atomic<uint64_t> read;
  alignas(kLine) int64_t pid;  // written once by the rank before it says it has the segment
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counts are shared between processes");

std::unique_ptr<HostMemory> HostMemory::join(c10d::Store& store, int rank, int size,
                                             std::chrono::milliseconds timeout) {
  const int64_t bytes = segment_bytes(size);
  std::string name;
  uint64_t nonce = 0;
  void* base = nullptr;
  if (rank == 0) {
    const char* off = std::getenv("H3_DIST_SHM");
    if (!(off && std::string(off) == "0")) {
      std::random_device random;
      nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
      std::ostringstream n;
      n << "/h3-" << ::getpid() << "-" << std::hex << nonce;
      // Only this user may open it, and it is unlinked as soon as every rank has it mapped.
      const int fd = ::shm_open(n.str().c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) {
        if (::ftruncate(fd, bytes) == 0) {
          base = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          if (base == MAP_FAILED) base = nullptr;
        }
        ::close(fd);
        if (base) {
          auto* h = static_cast<Header*>(base);
          h->size = size;
          h->slot_bytes = kSlotBytes;
          h->nonce = nonce;
          h->magic = kMagic;
          name = n.str();
        } else {
          ::shm_unlink(n.str().c_str());
        }
      }
    }
    std::ostringstream v;
    v << name << " " << nonce;
    const std::string s = v.str();
    store.set(key("segment"), std::vector<uint8_t>(s.begin(), s.end()));
  } else {
    try {
      store.wait({key("segment")}, timeout);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kDistributed, "rank " + std::to_string(rank) + ": rank 0 did not say within " +
                                               std::to_string(timeout.count()) +
                                               " ms whether the ranks share memory: " + e.what());
    }
    const std::vector<uint8_t> v = store.get(key("segment"));
    std::istringstream in(std::string(v.begin(), v.end()));
    in >> name >> nonce;
    if (name.rfind("/h3-", 0) == 0) {
      const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
      if (fd >= 0) {
        base = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED) base = nullptr;
        ::close(fd);
      }
      // Another host's /dev/shm may hold a segment of the same name; the nonce tells it apart.
      const auto* h = static_cast<const Header*>(base);
      if (base &&
          !(h->magic == kMagic && h->nonce == nonce && h->size == size && h->slot_bytes == kSlotBytes)) {
        ::munmap(base, static_cast<size_t>(bytes));
        base = nullptr;
      }
    }
  }
  // Every rank says whether it has the segment, and in which pid namespace it runs; all use it only
  // if all have it in one namespace (their peers' deaths are then told by pid).
  if (base) {
    reinterpret_cast<Control*>(static_cast<uint8_t*>(base) + kLine + rank * 3 * kLine)->pid = ::getpid();
  }
  const std::string said = base ? "1 " + pid_namespace() : "0";
  store.set(key("mapped/" + std::to_string(rank)), std::vector<uint8_t>(said.begin(), said.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key("mapped/" + std::to_string(r)));
  bool all = true;
  try {
    store.wait(keys, timeout);
    for (const std::string& k : keys) {
      const std::vector<uint8_t> v = store.get(k);
      all = all && std::string(v.begin(), v.end()) == said && said.size() > 2;
    }
  } catch (const std::exception& e) {
    if (base) ::munmap(base, static_cast<size_t>(bytes));
    if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());
    throw Error(ErrorKind::kDistributed,
                "rank " + std::to_string(rank) + ": the ranks did not all say within " +
                    std::to_string(timeout.count()) + " ms whether they share memory: " + e.what());
  }
  if (rank == 0 && !name.empty()) ::shm_unlink(name.c_str());  // every rank has it mapped or gave up
  if (!all) {
    if (base) ::munmap(base, static_cast<size_t>(bytes));
    return nullptr;
  }
  return std::unique_ptr<HostMemory>(new HostMemory(rank, size, base, bytes, kSlotBytes));
}

HostMemory::HostMemory(int rank, int size, void* base, int64_t bytes, int64_t slot_bytes)
    : rank_(rank), size_(size), base_(base), bytes_(bytes), slot_bytes_(slot_bytes) {
  static_assert(sizeof(Control) == 3 * kLine, "a rank's counts and pid take three cache lines");
}

HostMemory::~HostMemory() {
  ::munmap(base_, static_cast<size_t>(bytes_));
}

HostMemory::Control& HostMemory::control(int r) const {
  return *reinterpret_cast<Control*>(static_cast<uint8_t*>(base_) + kLine + r * 3 * kLine);
}

uint8_t* HostMemory::slot(int r) const {
  return static_cast<uint8_t*>(base_) + kLine + size_ * 3 * kLine + r * slot_bytes_;
}

std::vector<int> HostMemory::ended_ranks() const {
  std::vector<int> ended;
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && !process_runs(control(r).pid)) ended.push_back(r);
  }
  return ended;
}

void HostMemory::wait_all(bool posted, uint64_t at_least, const Check& check) {
  const auto start = std::chrono::steady_clock::now();
  auto next_check = start + std::chrono::milliseconds(1);
  for (uint64_t spin = 0;; ++spin) {
    bool all = true;
    for (int r = 0; r < size_ && all; ++r) {
      const std::atomic<uint64_t>& c = posted ? control(r).posted : control(r).read;
      all = c.load(std::memory_order_acquire) >= at_least;
    }
    if (all) return;
    // A peer is usually a few microseconds behind; one that computes for a while should not
    // have this rank take the core it needs: yield, then sleep in short naps.
    if (spin < 64) continue;
    const auto now = std::chrono::steady_clock::now();
    if (now - start < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (now >= next_check) {
      check();
      next_check = now + std::chrono::milliseconds(1);
    }
  }
}

void HostMemory::round(const uint8_t* mine, int64_t bytes, const std::function<void()>& read,
                       const Check& check) {
  const uint64_t s = ++round_;
  wait_all(/*posted=*/false, s - 1, check);  // every rank has read the last round's slots
  if (bytes > 0) std::memcpy(slot(rank_), mine, static_cast<size_t>(bytes));
  control(rank_).posted.store(s, std::memory_order_release);
  wait_all(/*posted=*/true, s, check);
  read();
  control(rank_).read.store(s, std::memory_order_release);
}

void HostMemory::reduce(at::Tensor& t, bool sum, const Check& check) {
  const int64_t item = static_cast<int64_t>(t.element_size()), n = t.numel();
  const int64_t per_round = slot_bytes_ / item;
  uint8_t* data = static_cast<uint8_t*>(t.data_ptr());
  // On this thread alone: an OpenMP region here would leave its pool spinning on the cores the
  // peer processes need for their part of the same collective.
  const c10::ParallelGuard one_thread(true);
  const int64_t rounds = rounds_for(n, per_round);
  for (int64_t i = 0; i < rounds; ++i) {
    const int64_t first = i * per_round, count = std::max<int64_t>(0, std::min(per_round, n - first));
    // Rank r's share of the chunk: elements [share(r), share(r + 1)).
    const auto share = [&](int r) { return count * r / size_; };
    const int64_t lo = share(rank_), hi = share(rank_ + 1);
    // Reduce-scatter: each rank sums its share over every slot, in rank order (the same order on
    // every rank's share, so the bits are those of one rank summing it all), into its own output.
    round(
        data + first * item, count * item,
        [&] {
          if (hi == lo) return;
          auto part = [&](int r) { return at::from_blob(slot(r) + lo * item, {hi - lo}, t.options()); };
          at::Tensor out = at::from_blob(data + (first + lo) * item, {hi - lo}, t.options());
          if (sum) {
            at::add_out(out, part(0), part(1));
            for (int r = 2; r < size_; ++r) out.add_(part(r));
          } else {
            at::maximum_out(out, part(0), part(1));
            for (int r = 2; r < size_; ++r) at::maximum_out(out, out, part(r));
          }
        },
        check);
    // All-gather of the shares, each final in its owner's slot.
    round(
        data + (first + lo) * item, (hi - lo) * item,
        [&] {
          for (int r = 0; r < size_; ++r) {
            if (r == rank_) continue;
            std::memcpy(data + (first + share(r)) * item, slot(r),
                        static_cast<size_t>((share(r + 1) - share(r)) * item));
          }
        },
        check);
  }
}

void HostMemory::all_reduce_sum(at::Tensor& t, const Check& check) {
  reduce(t, true, check);
}

void HostMemory::all_reduce_max(at::Tensor& t, const Check& check) {
  reduce(t, false, check);
}

void HostMemory::all_gather(const at::Tensor& in, at::Tensor& out, const Check& check) {
  const int64_t n = in.numel() * static_cast<int64_t>(in.element_size());
  const uint8_t* mine = static_cast<const uint8_t*>(in.data_ptr());
  uint8_t* all = static_cast<uint8_t*>(out.data_ptr());
  const int64_t rounds = rounds_for(n, slot_bytes_);
  for (int64_t i = 0; i < rounds; ++i) {
    const int64_t first = i * slot_bytes_, bytes = std::min(slot_bytes_, n - first);
    round(
        mine + first, bytes,
        [&] {
          for (int r = 0; r < size_; ++r)
            std::memcpy(all + r * n + first, slot(r), static_cast<size_t>(bytes));
        },
        check);
  }
}

void HostMemory::broadcast(at::Tensor& t, int root, const Check& check) {
  const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
  uint8_t* data = static_cast<uint8_t*>(t.data_ptr());
  const int64_t rounds = rounds_for(n, slot_bytes_);
  for (int64_t i = 0; i < rounds; ++i) {
    const int64_t first = i * slot_bytes_, bytes = std::min(slot_bytes_, n - first);
    round(
        rank_ == root ? data + first : nullptr, rank_ == root ? bytes : 0,
        [&] {
          if (rank_ != root) std::memcpy(data + first, slot(root), static_cast<size_t>(bytes));
        },
        check);
  }
}

bool HostMemory::carries_all_to_all(const std::vector<std::vector<int64_t>>& counts, int64_t item) const {
  for (const auto& row : counts) {
    int64_t bytes = 0;
    for (int64_t c : row) bytes += c * item;
    if (bytes > slot_bytes_) return false;
  }
  return true;
}

void HostMemory::all_to_all(const at::Tensor& in, at::Tensor& out,
                            const std::vector<std::vector<int64_t>>& counts, const Check& check) {
  const int64_t item = static_cast<int64_t>(in.element_size());
  int64_t mine = 0;
  for (int64_t c : counts[static_cast<size_t>(rank_)]) mine += c * item;
  uint8_t* to = static_cast<uint8_t*>(out.data_ptr());
  round(
      static_cast<const uint8_t*>(in.data_ptr()), mine,
      [&] {
        int64_t at_out = 0;
        for (int r = 0; r < size_; ++r) {
          const auto& row = counts[static_cast<size_t>(r)];
          int64_t from = 0;  // where rank r's part for this rank starts in its slot
          for (int j = 0; j < rank_; ++j) from += row[static_cast<size_t>(j)] * item;
          const int64_t bytes = row[static_cast<size_t>(rank_)] * item;
          std::memcpy(to + at_out, slot(r) + from, static_cast<size_t>(bytes));
          at_out += bytes;
        }
      },
      check);
}

}  // namespace h3::dist
