// `h3 worker`: a rank >= 1 of a process world (docs/distributed.md). Rank 0 is `h3 generate
// --rendezvous` or the element with its `rendezvous` property.
#include <c10/util/Logging.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "engine/engine.h"
#include "engine/planning/memory_guard.h"
#include "h3/error.h"
#include "h3/limits.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

int run(Args& a) {
  WorkerOptions o;
  o.rendezvous = a.string("rendezvous");
  o.world_size = static_cast<int>(a.int_required("world-size", 2, kMaxRanks));
  o.rank = static_cast<int>(a.int_required("rank", 1, kMaxRanks - 1));
  o.token_file = a.string("token-file");
  const std::string device = a.string_or("device", "cpu");
  o.compute_dtype = a.string_or("compute-dtype", "");
  o.sp = static_cast<int>(a.int_or("sp", 1, 1, kMaxRanks));
  o.ref2va = a.flag("ref2va");
  o.model_dir = a.string_or("model", "");
  o.timeout = std::chrono::seconds(a.int_or("timeout", kDefaultTimeout.count(), 1, 86400));
  if (const auto m = a.opt_string("max-memory")) o.max_memory = parse_bytes(*m, "--max-memory");
  o.threads = static_cast<int>(a.int_or("threads", 0, 1, 1024));
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  if (o.model_dir.empty()) o.model_dir = default_model_dir();
  if (device == "cpu") {
    o.device = "cpu";
  } else if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
             device.find_first_not_of("0123456789", 5) == std::string::npos) {
    o.device = "cuda";
    o.cuda_device = std::stoi(device.substr(5));
  } else {
    throw UsageError{"--device must be cpu or cuda:K, got '" + device + "'"};
  }
  if (o.rank >= o.world_size) {
    throw UsageError{"--rank " + std::to_string(o.rank) + " is not a worker rank of a world of " +
                     std::to_string(o.world_size) + " (1.." + std::to_string(o.world_size - 1) + ")"};
  }
  // Between requests this rank waits for rank 0 in short slices of store waits, and c10d warns
  // about each slice that ends ("waitForInput ... timed out"): about one line a second in the
  // worker's log while it idles. Errors only, unless the user chose a level.
  if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = 2;
  // Gloo writes to its peers with writev, which raises SIGPIPE when rank 0 died mid-request; its
  // default action would end this process with no word (exit 141). Ignored, the write fails with
  // EPIPE, and the worker says that it lost rank 0.
  std::signal(SIGPIPE, SIG_IGN);
  run_worker(o);
  std::fprintf(stderr, "h3 worker: rank %d: rank 0 said stop\n", o.rank);
  return 0;
}

H3_REGISTER_COMMAND(
    "worker", "a rank in another process or on another host, serving rank 0's requests",
    "usage: h3 worker --rendezvous HOST:PORT --world-size N --rank R --token-file FILE\n"
    "                 [--device cpu|cuda:K] [--compute-dtype fp32|bf16] [--sp S] [--ref2va] [--model DIR]\n"
    "                 [--max-memory BYTES] [--threads N] [--timeout S]\n"
    "\n"
    "  --rendezvous HOST:PORT  where rank 0 (`h3 generate --rendezvous`, or the element's\n"
    "                          `rendezvous` property) serves the rendezvous store\n"
    "  --world-size N          every rank, rank 0 included\n"
    "  --rank R                this worker's rank, 1..N-1\n"
    "  --token-file FILE       the shared token; only its owner may read it (chmod 600)\n"
    "  --device cpu|cuda:K     where this rank computes (cuda: NCCL between the ranks)\n"
    "  --compute-dtype fp32|bf16  the DiT's and the text encoder's precision: rank 0's (checked\n"
    "                          when it joins); default: the device's (fp32 on cpu, bf16 on cuda)\n"
    "  --sp S                  the DiT's Ulysses degree: rank 0's --sp (checked when it joins;\n"
    "                          default 1)\n"
    "  --ref2va                Ref2VA's DiT (transformer_ref/): when rank 0 serves references\n"
    "                          (checked when it joins)\n"
    "  --model DIR             the same model as rank 0's (checked when it joins)\n"
    "  --max-memory BYTES      the most a request may take in this process beside its weights\n"
    "                          (8G, 512M, ...); default: what this host has available. A request\n"
    "                          over it fails on every rank before any work, naming this rank\n"
    "  --threads N             this process's intra-op threads; default: the cores it may use\n"
    "                          (affinity mask, cgroup CPU limit) shared among the world's ranks\n"
    "                          on them, stated when it joins (OMP_NUM_THREADS is not used)\n"
    "  --timeout S             how long to wait for rank 0, and the bound on every collective\n"
    "                          (default 120)\n"
    "\n"
    "The worker waits for rank 0, presents the token, loads its own shards and serves rank 0's\n"
    "requests until rank 0 says stop (exit 0). When another rank is lost it waits for rank 0 to\n"
    "form the world again at its next request. Exit 1: refused (wrong token, a different model or\n"
    "settings; the message says what differs), rank 0 never appeared or went away.",
    run);

}  // namespace
}  // namespace h3::tools
