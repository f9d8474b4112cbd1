// `h3 bench load`: what a tensor-parallel rank keeps resident after loading
// the DiT, for the owned-shard loader (h3::io::Weights) and for the naive
// "load the whole tensor, keep a slice view" approach of the reference loaders.
//
// The parent writes a synthetic checkpoint shaped like H3 DiT blocks (diffusers
// names, real structure, smaller widths), then runs every (loader, tp)
// configuration in a fresh child process (the binary re-invoked with --child),
// because the peak resident set (VmHWM) of a process cannot be reset. Inside a
// child, ranks are threads; each opens the checkpoint itself as a real rank
// would. Figures only: nothing here asserts a time or a size.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "dit/config.h"
#include "dit/parameters.h"
#include "h3/error.h"
#include "io/checkpoint.h"
#include "io/weights.h"
#include "tools/command.h"
#include "tools/scratch_dir.h"

namespace h3::tools {
namespace {

// The checkpoint's DiT: the release's proportions (inner = 4/3 hidden, ffn = 8/3 hidden, time
// embedding = hidden / 2, AdaLN = 18 x hidden) at hidden 1536; its tensors are the declaration's
// (dit/parameters.h), in the release's dtypes.
dit::DitConfig bench_config(int64_t blocks) {
  dit::DitConfig c;
  c.hidden_size = 1536;
  c.num_layers = blocks;
  c.num_refiner_layers = 2;
  c.num_heads = 16;
  c.head_dim = 128;
  c.ffn_dim = 4096;
  c.text_dim = 1024;
  c.time_embed_hidden_dim = 1536;
  c.time_embed_dim = 768;
  c.validate("h3 bench load");
  return c;
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype;
};

std::vector<Spec> model_specs(int64_t blocks) {
  std::vector<Spec> s;
  for (const auto& p : dit::dit_parameters(bench_config(blocks)))
    s.push_back({p.name, p.shape, p.fp32 ? at::kFloat : at::kBFloat16});
  return s;
}

uint64_t bytes_of(const Spec& s) {
  return c10::multiply_integers(s.shape) * c10::elementSize(s.dtype);
}

// Shards of about 512 MiB plus an index, as the release ships them.
std::string write_checkpoint(const std::string& dir, int64_t blocks) {
  const auto specs = model_specs(blocks);
  constexpr uint64_t kShardBytes = 512ull << 20;
  std::vector<std::vector<Spec>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& s : specs) {
    if (in_shard + bytes_of(s) > kShardBytes && !shards.back().empty()) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(s);
    in_shard += bytes_of(s);
    total += bytes_of(s);
  }
  nlohmann::json index;
  index["metadata"]["total_size"] = total;
  // Values do not matter to the loader: every tensor is a slice of one random pool.
  at::manual_seed(0);
  uint64_t largest = 0;
  for (const auto& s : specs) largest = std::max(largest, bytes_of(s));
  const at::Tensor pool = at::randint(-32768, 32768, {static_cast<int64_t>(largest / 2)}, at::kShort);
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[96];  // the longest name (two 20-digit counts) is 80 characters
    std::snprintf(name, sizeof name, "diffusion_pytorch_model-%05zu-of-%05zu.safetensors", i + 1,
                  shards.size());
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& s : shards[i]) {
      const int64_t n = static_cast<int64_t>(bytes_of(s) / 2);
      tensors.push_back({s.name, pool.narrow(0, 0, n).view(s.dtype).view(s.shape)});
      index["weight_map"][s.name] = name;
    }
    io::write_safetensors(dir + "/" + name, tensors);
  }
  std::ofstream(dir + "/config.json") << bench_config(blocks).to_json();
  const std::string index_path = dir + "/diffusion_pytorch_model.safetensors.index.json";
  std::ofstream(index_path) << index.dump(1);
  return index_path;
}

// Bytes kept alive by a set of tensors: each distinct storage counted once, whole.
uint64_t retained_bytes(const std::vector<at::Tensor>& ts) {
  std::set<const void*> seen;
  uint64_t n = 0;
  for (const auto& t : ts) {
    if (seen.insert(t.storage().data()).second) n += t.storage().nbytes();
  }
  return n;
}

uint64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, std::strlen(key), key) == 0)
      return std::strtoull(line.c_str() + std::strlen(key) + 1, nullptr, 10);
  }
  return 0;
}

struct RankFigures {
  uint64_t retained = 0, ideal = 0;
  double seconds = 0;
  std::string error;
};

// One rank: loads every tensor of the plan and reports what it keeps.
RankFigures run_rank(const std::string& ckpt, bool naive, int rank, int tp) {
  RankFigures f;
  auto t0 = std::chrono::steady_clock::now();
  // Every tensor split as the engine's loader splits it: by its declaration for the folder's config.
  const dit::DitConfig c = dit::DitConfig::load(std::filesystem::path(ckpt).parent_path().string());
  io::Weights w = io::Weights::open(ckpt, {io::ModelKind::kDit, c.num_heads, c.head_dim});
  std::map<std::string, io::Split> splits;
  for (const auto& p : dit::dit_parameters(c)) splits[p.name] = p.split;
  std::vector<at::Tensor> kept;
  for (const auto& name : w.names()) {
    const io::Shard shard{splits.at(name), rank, tp};
    auto shape = w.shard_shape(name, shard);
    f.ideal += c10::multiply_integers(shape) * c10::elementSize(w.dtype(name));
    if (!naive) {
      kept.push_back(w.load(name, shard));
      continue;
    }
    // The reference loaders: the whole tensor in memory, then a slice of it.
    at::Tensor full = w.checkpoint().view(name).clone();
    switch (shard.split) {
      case io::Split::kReplicated: kept.push_back(full); break;
      case io::Split::kColumn: kept.push_back(full.chunk(tp, 0)[rank].contiguous()); break;
      case io::Split::kRow: kept.push_back(full.chunk(tp, 1)[rank].contiguous()); break;
      case io::Split::kFusedColumn: {
        auto h = full.chunk(2, 0);
        kept.push_back(at::cat({h[0].chunk(tp, 0)[rank], h[1].chunk(tp, 0)[rank]}, 0));
        break;
      }
    }
  }
  f.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  f.retained = retained_bytes(kept);
  return f;
}

int run_child(const std::string& ckpt, const std::string& mode, int tp) {
  at::set_num_threads(1);  // ranks are the parallelism here
  const uint64_t baseline = status_kib("VmRSS:");
  std::vector<RankFigures> figs(tp);
  std::vector<std::thread> threads;
  for (int r = 0; r < tp; ++r) {
    threads.emplace_back([&, r] {
      try {
        figs[r] = run_rank(ckpt, mode == "naive", r, tp);
      } catch (const std::exception& e) {
        figs[r].error = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < tp; ++r) {
    if (!figs[r].error.empty())
      throw Error(ErrorKind::kInternal, "rank " + std::to_string(r) + ": " + figs[r].error);
    std::printf("RANK %d %llu %llu %.3f\n", r, static_cast<unsigned long long>(figs[r].retained),
                static_cast<unsigned long long>(figs[r].ideal), figs[r].seconds);
  }
  std::printf("PROC %llu %llu\n", static_cast<unsigned long long>(baseline),
              static_cast<unsigned long long>(status_kib("VmHWM:")));
  return 0;
}

double mib(uint64_t b) {
  return static_cast<double>(b) / (1 << 20);
}

int run_parent(int64_t blocks, const std::string& tmp_root) {
  const tools::ScratchDir scratch(tmp_root, "h3-bench-load-");
  const std::string& dir = scratch.path();

  const auto specs = model_specs(blocks);
  const dit::DitConfig c = bench_config(blocks);
  uint64_t total = 0, largest = 0;
  for (const auto& s : specs) {
    total += bytes_of(s);
    largest = std::max(largest, bytes_of(s));
  }
  std::printf(
      "h3 bench load: synthetic H3-shaped DiT, %lld blocks + %lld refiner blocks (hidden %lld, %lld heads x "
      "%lld, "
      "ffn %lld, AdaLN %lld x %lld), bf16 with fp32 heads\n",
      static_cast<long long>(blocks), static_cast<long long>(c.num_refiner_layers),
      static_cast<long long>(c.hidden_size), static_cast<long long>(c.num_heads),
      static_cast<long long>(c.head_dim), static_cast<long long>(c.ffn_dim),
      static_cast<long long>(c.adaln_width()), static_cast<long long>(c.time_embed_dim));
  auto t0 = std::chrono::steady_clock::now();
  const std::string index = write_checkpoint(dir, blocks);
  std::printf(
      "checkpoint: %zu tensors, %.1f MiB (%.3f GiB), largest tensor %.1f MiB; written in %.1f s to %s\n\n",
      specs.size(), mib(total), static_cast<double>(total) / (1ull << 30), mib(largest),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), dir.c_str());

  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) throw Error(ErrorKind::kInternal, "cannot find this executable (/proc/self/exe)");
  exe[n] = '\0';

  std::printf("%-6s %2s %4s %13s %10s %7s %7s\n", "loader", "tp", "rank", "retained MiB", "ideal MiB",
              "ratio", "load s");
  std::vector<std::string> proc_lines;
  for (const char* mode : {"owned", "naive"}) {
    for (int tp : {1, 2, 4}) {
      const std::string cmd = std::string("'") + exe + "' bench load --child " + mode + " --tp " +
                              std::to_string(tp) + " --checkpoint '" + index + "'";
      FILE* p = ::popen(cmd.c_str(), "r");
      if (!p) throw Error(ErrorKind::kInternal, "cannot start " + cmd);
      char line[512];
      uint64_t ideal_sum = 0;
      while (std::fgets(line, sizeof line, p)) {
        int r = 0;
        unsigned long long ret = 0, ideal = 0, base = 0, hwm = 0;
        double secs = 0;
        if (std::sscanf(line, "RANK %d %llu %llu %lf", &r, &ret, &ideal, &secs) == 4) {
          ideal_sum += ideal;
          std::printf("%-6s %2d %4d %13.1f %10.1f %7.3f %7.2f\n", mode, tp, r, mib(ret), mib(ideal),
                      static_cast<double>(ret) / static_cast<double>(ideal), secs);
        } else if (std::sscanf(line, "PROC %llu %llu", &base, &hwm) == 2) {
          const uint64_t peak_load = (hwm - std::min(hwm, base)) << 10;
          const uint64_t goal = ideal_sum + static_cast<uint64_t>(tp) * largest;
          char buf[256];
          std::snprintf(buf, sizeof buf, "%-6s %2d %13.1f %10.1f %16.1f %22.1f %6.2f", mode, tp,
                        mib(base << 10), mib(hwm << 10), mib(peak_load), mib(goal),
                        static_cast<double>(peak_load) / static_cast<double>(goal));
          proc_lines.push_back(buf);
        } else {
          std::fputs(line, stdout);
        }
      }
      if (int st = ::pclose(p); st != 0) {
        throw Error(ErrorKind::kInternal,
                    std::string("child run failed (") + mode + ", tp " + std::to_string(tp) + ")");
      }
    }
  }
  std::printf("\npeak resident memory of each configuration's process (ranks are threads; VmHWM):\n");
  std::printf("%-6s %2s %13s %10s %16s %22s %6s\n", "loader", "tp", "baseline MiB", "peak MiB",
              "peak-base MiB", "goal MiB (sum ideal", "/goal");
  std::printf("%-6s %2s %13s %10s %16s %22s\n", "", "", "", "", "", " + tp x largest)");
  for (const auto& l : proc_lines) std::printf("%s\n", l.c_str());
  std::printf(
      "\nretained: bytes of the storages a rank's tensors keep alive; ideal: its shard of split tensors "
      "plus\n"
      "the replicated ones. naive = whole tensor read into memory, then chunk(tp)[rank].contiguous().\n");
  return 0;
}

int run(Args& args) {
  const auto child = args.opt_string("child");
  if (child) {
    const int tp = static_cast<int>(args.int_required("tp", 1, 64));
    const std::string ckpt = args.string("checkpoint");
    args.finish();
    if (*child != "owned" && *child != "naive") throw UsageError{"--child takes owned or naive"};
    return run_child(ckpt, *child, tp);
  }
  const int64_t blocks = args.int_or("blocks", 10, 1, 200);
  const char* env_tmp = std::getenv("TMPDIR");
  const std::string tmp = args.string_or("dir", env_tmp && *env_tmp ? env_tmp : "/tmp");
  args.finish();
  return run_parent(blocks, tmp);
}

H3_REGISTER_COMMAND(
    "bench load", "checkpoint loading: resident bytes per tensor-parallel rank, owned vs naive",
    "usage: h3 bench load [--blocks N] [--dir DIR]\n\n"
    "Writes a synthetic H3-shaped DiT checkpoint (diffusers names, sharded with an index; about\n"
    "1.1 GiB at the default 10 blocks) in a temp folder under DIR, loads it at tp = 1, 2, 4 with\n"
    "ranks as threads, once with the owned-shard loader and once the naive way (whole tensor,\n"
    "then a slice view), each configuration in a fresh child process, and prints per rank the\n"
    "retained and ideal bytes and their ratio, and each process's peak resident memory. The\n"
    "folder is deleted at the end.\n\n"
    "  --blocks N   transformer blocks in the synthetic model (default 10)\n"
    "  --dir DIR    where to write the temp checkpoint (default $TMPDIR or /tmp)\n"
    "  --child owned|naive --tp N --checkpoint PATH   (internal: one configuration)",
    run);

}  // namespace
}  // namespace h3::tools
