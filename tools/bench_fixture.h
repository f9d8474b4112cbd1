// What the stream benchmarks (`h3 bench causal`, `bench live`, `bench streams`) share: the model
// they run on (the embedded default, or the medium random model written to a scratch folder) with
// its random LoRA and an engine opened on it, and a sink that records when each chunk's frames
// arrived. One place, so that the three tables are made on the same models, sizes and adapters.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace h3::tools {

using BenchClock = std::chrono::steady_clock;

double seconds_since(BenchClock::time_point t0);

enum class BenchModel {
  kTiny,    // the embedded default, at 256x160 (its default size); a LoRA of rank 4, alpha 8
  kMedium,  // medium_spec() written with seed 11, at 320x192; a LoRA of rank 16, alpha 16
};

struct BenchSetup {
  const char* name = "";  // "tiny" or "medium": the tables' first column
  std::string model_dir;
  std::string lora;  // the random adapter (seed 5), in the scratch folder
  int64_t width = 0, height = 0;
  std::unique_ptr<Engine> engine;

  // A request on this model at its size, with its LoRA.
  GenerationRequest request(const std::string& prompt, uint64_t seed) const;
};

// Writes what `which` needs into `scratch` (the medium model, the LoRA) and opens an engine with
// `ranks` thread ranks on it.
BenchSetup open_bench_model(BenchModel which, const std::string& scratch, int ranks = 1);

// When each chunk's frames arrived, from `t0`; with a control and `finish_after` > 0, finishes
// the (endless) stream once that many chunks came; with `sample_rss`, the resident set at each.
class ArrivalSink : public ChunkSink {
 public:
  explicit ArrivalSink(BenchClock::time_point t0, StreamControl* control = nullptr, int64_t finish_after = 0,
                       bool sample_rss = false)
      : t0_(t0), control_(control), finish_after_(finish_after), sample_rss_(sample_rss) {}
  void on_chunk(const Chunk& c) override;

  // Called after each chunk's arrival is recorded (a benchmark that waits for its streams).
  std::function<void()> on_arrival;

  std::vector<double> arrivals;  // seconds from t0
  std::vector<double> rss;       // MiB, when sampled
  int64_t frames = 0;
  // Audio samples (per channel) of the chunks without frames, counted while each stretch starts
  // where the last ended; `audio_gap` the first sample where one did not (-1: none).
  int64_t samples = 0, audio_gap = -1;

  double mean_period() const;    // mean time between two chunks after the first (0: fewer than 2)
  double median_period() const;  // their median
  // The largest resident set over chunks [begin, begin + 10): one sample moves with what a
  // chunk's forward happens to hold at that moment.
  double rss_over(size_t begin) const;

 private:
  BenchClock::time_point t0_;
  StreamControl* control_;
  int64_t finish_after_;
  bool sample_rss_;
};

}  // namespace h3::tools
