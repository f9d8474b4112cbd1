// `h3 bench text`: the prompt path's figures — tokenizer throughput on a long prompt, the text
// encoder's time per token at the tiny and a medium width at TP 1 and TP 2 in fp32 and bf16, and the peak
// memory of loading the first K of N layers against all of them, and the engine's memory with the encoder
// freed after encoding against kept.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>

#include "dist/group.h"
#include "dist/world.h"
#include "engine/engine.h"
#include "h3/error.h"
#include "text/random_encoder.h"
#include "text/text_encoder.h"
#include "text/tokenizer.h"
#include "tools/command.h"
#include "tools/cpu_time.h"
#include "tools/scratch_dir.h"
#include "tools/tiny_model.h"

extern char** environ;

namespace h3::tools {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Timing {
  double wall = 1e30, cpu = 1e30;  // best of the runs
};

// A long prompt of mixed prose, markup, digits and non-Latin text.
std::string long_prompt(size_t chars) {
  const std::string unit =
      "[Shot 1] A wide aerial shot of a coastal city at dawn, soft golden light over 12 bridges. "
      "<d>[English] We made it.</d> Une femme marche sous la pluie; 一只猫在阳光下睡觉。 Привет! ";
  std::string s;
  while (s.size() < chars) s += unit;
  s.resize(chars);
  while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();  // whole chars
  if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
  return s;
}

size_t utf8_chars(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// One forward of `tokens` random ids at `ranks` ranks, one compute thread each: the best wall and
// per-rank CPU seconds of `repeat` runs (the slowest rank's).
Timing encoder_timing(const std::string& dir, int64_t layer, int ranks, int64_t tokens, int repeat,
                      at::ScalarType dtype) {
  const auto config = text::EncoderConfig::load(dir);
  auto ids = at::randint(config.vocab_size, {tokens}, at::TensorOptions().dtype(at::kLong));
  std::vector<int64_t> v(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + tokens);
  std::vector<Timing> best(static_cast<size_t>(ranks));
  auto body = [&](dist::Group* g) {
    at::set_num_threads(1);
    text::EncoderOptions o;
    o.dtype = dtype;
    const auto enc = text::TextEncoder::load(dir, layer, g, o);
    enc.forward(v);  // warm-up
    Timing& mine = best[g ? static_cast<size_t>(g->rank()) : 0];
    for (int r = 0; r < repeat; ++r) {
      if (g) g->barrier();
      const auto t = Clock::now();
      const double c = thread_cpu_seconds();
      enc.forward(v);
      mine.cpu = std::min(mine.cpu, thread_cpu_seconds() - c);
      mine.wall = std::min(mine.wall, since(t));
    }
  };
  if (ranks == 1) {
    body(nullptr);
  } else {
    for (const auto& r : dist::run_threads(ranks, [&](dist::Group& g) { body(&g); })) {
      if (!r.ok)
        throw Error(ErrorKind::kDistributed, "rank " + std::to_string(r.rank) + " failed: " + r.error);
    }
  }
  Timing worst{0, 0};
  for (const auto& b : best) {
    worst.wall = std::max(worst.wall, b.wall);
    worst.cpu = std::max(worst.cpu, b.cpu);
  }
  return worst;
}

// The memory of a fresh process running this command with `measure_args` (--measure-load or
// --measure-engine), so each figure starts from the same empty process: three figures in KiB.
struct Memory {
  long peak_kib = -1, loaded_kib = -1, after_kib = -1;
};
Memory memory_of(std::vector<std::string> measure_args, const std::string& out_file) {
  std::vector<std::string> args{"h3", "bench", "text"};
  args.insert(args.end(), measure_args.begin(), measure_args.end());
  args.insert(args.end(), {"--result", out_file});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
    throw Error(ErrorKind::kInternal, "bench text: cannot start the measuring process");
  }
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(out_file);
  Memory m;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !(in >> m.peak_kib >> m.loaded_kib >> m.after_kib)) {
    throw Error(ErrorKind::kInternal, "bench text: the measuring process " + measure_args.front() + " " +
                                          measure_args.at(1) + " failed");
  }
  return m;
}

// A field of /proc/self/status in KiB: VmHWM, the peak RSS of this process's own address space
// (ru_maxrss would carry the spawning parent's peak across exec), or VmRSS, the current one.
long status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string key;
  long kib = -1;
  while (in >> key) {
    if (key == field) {
      in >> kib;
      break;
    }
    std::getline(in, key);
  }
  return kib;
}

// The measuring process: loads, then frees the weights (TextEncoder::release) and writes
// "peak-KiB resident-after-load-KiB resident-after-release-KiB".
int measure_load(const std::string& dir, int64_t layer, const std::string& result) {
  at::set_num_threads(1);
  auto enc = text::TextEncoder::load(dir, layer);
  const long peak = status_kib("VmHWM:"), loaded = status_kib("VmRSS:");
  enc.release();
  std::ofstream(result) << peak << " " << loaded << " " << status_kib("VmRSS:") << "\n";
  return 0;
}

// The measuring process for the engine option: opens the engine on `model_dir`, generates one short
// clip from a prompt and writes "peak-KiB resident-after-open-KiB resident-after-generate-KiB".
int measure_engine(const std::string& model_dir, bool free_text_encoder, const std::string& result) {
  at::set_num_threads(1);
  EngineOptions eo;
  eo.model_dir = model_dir;
  eo.free_text_encoder = free_text_encoder;
  auto engine = Engine::open(eo);
  const long opened = status_kib("VmRSS:");
  GenerationRequest req;
  req.prompt = "a lighthouse at dusk, waves breaking";
  req.width = 64;
  req.height = 64;
  req.num_frames = 5;
  req.steps = 2;
  class Discard : public ChunkSink {
    void on_chunk(const Chunk&) override {}
  } sink;
  StreamControl cancel;
  engine->generate(req, sink, ProgressFn(), cancel);
  std::ofstream(result) << status_kib("VmHWM:") << " " << opened << " " << status_kib("VmRSS:") << "\n";
  return 0;
}

text::EncoderConfig medium_config(int64_t layers) {
  text::EncoderConfig c = tiny_spec().encoder;
  c.hidden_size = 1024;
  c.num_layers = layers;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.intermediate_size = 4096;
  c.vocab_size = 8192;  // random ids: the benchmark needs no tokenizer
  c.mrope_section = {24, 20, 20};
  return c;
}

int run(Args& a) {
  const auto measure = a.opt_string("measure-load");
  const auto measure_engine_dir = a.opt_string("measure-engine");
  const bool free_text_encoder = a.flag("free-text-encoder");
  const int64_t layer = a.int_or("layer", 2, 1, 1 << 20);
  const auto result = a.opt_string("result");
  const int64_t chars = a.int_or("chars", 200000, 1000, 1 << 20);
  const int64_t tokens = a.int_or("tokens", 256, 1, 1 << 16);
  const int repeat = static_cast<int>(a.int_or("repeat", 3, 1, 100));
  const std::string tmp_root = a.string_or("dir", "/tmp");
  a.finish();
  if (measure) {
    if (!result) throw UsageError{"--measure-load needs --result"};
    return measure_load(*measure, layer, *result);
  }
  if (measure_engine_dir) {
    if (!result) throw UsageError{"--measure-engine needs --result"};
    return measure_engine(*measure_engine_dir, free_text_encoder, *result);
  }
  ScratchDir scratch(tmp_root, "h3-bench-text-");

  // Tokenizer throughput.
  {
    // Loading is on every cold start's path to the first frame (vocab.json and merges.txt: the
    // release's 151 k tokens and merges).
    double load_wall = 1e30;
    std::optional<text::Tokenizer> loaded;
    for (int r = 0; r < repeat; ++r) {
      const auto t = Clock::now();
      text::Tokenizer next = text::Tokenizer::load(default_tokenizer_source());
      load_wall = std::min(load_wall, since(t));
      loaded.emplace(std::move(next));  // the previous one is freed outside the timing
    }
    std::printf("tokenizer load: %.3f s (%s)\n", load_wall, default_tokenizer_source().c_str());
    const text::Tokenizer& tok = *loaded;
    const std::string prompt = long_prompt(static_cast<size_t>(chars));
    Timing best;
    size_t ids = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t = Clock::now();
      const double c = thread_cpu_seconds();
      ids = tok.encode(prompt).size();
      best.cpu = std::min(best.cpu, thread_cpu_seconds() - c);
      best.wall = std::min(best.wall, since(t));
    }
    const double n = static_cast<double>(utf8_chars(prompt));
    std::printf(
        "tokenizer: %.0f characters (%zu bytes) -> %zu ids: %.0f characters/s of CPU time "
        "(%.3f s), %.0f characters/s of wall time\n",
        n, prompt.size(), ids, n / best.cpu, best.cpu, n / best.wall);
  }

  // Encoder time per token: tiny and medium width, TP 1 and TP 2.
  struct Width {
    const char* name;
    text::EncoderConfig config;
  };
  text::EncoderConfig tiny = tiny_spec().encoder;
  tiny.hidden_size = tiny_spec().dit.text_dim;
  tiny.vocab_size = 8192;
  for (const Width& w : {Width{"tiny", tiny}, Width{"medium", medium_config(4)}}) {
    const std::string dir = scratch.path() + "/" + w.name;
    text::write_random_encoder(dir, w.config, 7);
    const int64_t k = w.config.num_layers - 1;
    for (int ranks : {1, 2}) {
      double fp32_cpu = 0;
      for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        const Timing t = encoder_timing(dir, k, ranks, tokens, repeat, dtype);
        const double per = 1e3 / static_cast<double>(tokens);
        const bool bf16 = dtype == at::kBFloat16;
        if (!bf16) fp32_cpu = t.cpu;
        char rate[48] = "";
        if (bf16) std::snprintf(rate, sizeof rate, " (%.2fx fp32's rate)", fp32_cpu / t.cpu);
        std::printf(
            "encoder %-6s (hidden %lld, %lld layers, %lld tokens) TP%d %s: %.4f ms/token of CPU time per "
            "rank, %.4f ms/token of wall time%s\n",
            w.name, (long long)w.config.hidden_size, (long long)k, (long long)tokens, ranks,
            bf16 ? "bf16" : "fp32", t.cpu * per, t.wall * per, rate);
      }
    }
  }

  // Peak memory: the first 50 layers (the release's K) against 64 (all of the release's), at a small
  // width; the model has a 65th layer so that K = 64 is a valid conditioning layer.
  {
    text::EncoderConfig c = medium_config(65);
    c.hidden_size = 256;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 64;
    c.mrope_section = {12, 10, 10};
    c.intermediate_size = 1024;
    const std::string dir = scratch.path() + "/deep";
    text::write_random_encoder(dir, c, 9);
    for (int64_t k : {50, 64}) {
      const Memory m = memory_of({"--measure-load", dir, "--layer", std::to_string(k)},
                                 scratch.path() + "/rss" + std::to_string(k));
      std::printf(
          "load %lld layers (hidden 256, SwiGLU 1024; bf16 file, fp32 in memory): peak RSS %.1f MiB, "
          "RSS %.1f MiB loaded, %.1f MiB after release()\n",
          (long long)k, m.peak_kib / 1024.0, m.loaded_kib / 1024.0, m.after_kib / 1024.0);
    }
  }

  // The engine option: the tiny model with a deeper, wider encoder (51 layers, K = 50, SwiGLU
  // 8192 at the DiT's text width), one short prompt-conditioned clip with the encoder kept and
  // with it freed after encoding (EngineOptions::free_text_encoder), each in a fresh process.
  {
    TinySpec spec = tiny_spec();
    spec.encoder.num_layers = 51;
    spec.encoder.intermediate_size = 8192;
    spec.text_encoder_layer = 50;
    const std::string dir = scratch.path() + "/engine-model";
    write_random_model(dir, spec, 11);
    for (bool free : {false, true}) {
      std::vector<std::string> args{"--measure-engine", dir};
      if (free) args.push_back("--free-text-encoder");
      const Memory m = memory_of(args, scratch.path() + (free ? "/rss-free" : "/rss-keep"));
      std::printf(
          "engine, 50-layer encoder (hidden %lld, SwiGLU 8192) %s: RSS %.1f MiB after open, %.1f MiB "
          "after one clip (peak %.1f MiB)\n",
          (long long)spec.encoder.hidden_size, free ? "freed after encoding" : "kept (default)",
          m.loaded_kib / 1024.0, m.after_kib / 1024.0, m.peak_kib / 1024.0);
    }
  }
  return 0;
}

H3_REGISTER_COMMAND("bench text", "tokenizer throughput, text encoder time per token, load memory",
                    "usage: h3 bench text [--chars N] [--tokens N] [--repeat N] [--dir TMP]\n"
                    "\n"
                    "Prints the H3 tokenizer's throughput on a long mixed prompt (characters/s), the\n"
                    "Qwen3-VL text encoder's time per token at the tiny default's width and at a medium\n"
                    "width (hidden 1024, 8 / 2 heads of 128), each at TP 1 and TP 2 (ranks as threads,\n"
                    "one compute thread each; CPU time per rank and wall time) in fp32 and in bf16 (with\n"
                    "bf16's rate against fp32's),\n"
                    "and the resident memory of loading 50 layers against 64 (peak, loaded, after\n"
                    "TextEncoder::release()), each in a fresh process; then the engine's resident\n"
                    "memory after one prompt-conditioned clip with the text encoder kept and with\n"
                    "--free-text-encoder (h3 generate's flag), each in a fresh process. Random weights,\n"
                    "written to a temp folder under TMP (default /tmp).\n"
                    "\n"
                    "  --chars N   tokenizer prompt length in bytes (default 200000)\n"
                    "  --tokens N  prompt length of the encoder runs (default 256)\n"
                    "  --repeat N  runs per figure; the best is printed (default 3)",
                    run);

}  // namespace
}  // namespace h3::tools
