#include "tools/bench_fixture.h"

#include <algorithm>

#include "dit/random_model.h"
#include "tools/process_memory.h"
#include "tools/tiny_model.h"

namespace h3::tools {

double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

GenerationRequest BenchSetup::request(const std::string& prompt, uint64_t seed) const {
  GenerationRequest r;
  r.prompt = prompt;
  r.seed = seed;
  r.width = width;
  r.height = height;
  r.lora = lora;
  return r;
}

BenchSetup open_bench_model(BenchModel which, const std::string& scratch, int ranks) {
  BenchSetup s;
  int64_t lora_rank = 4;
  double lora_alpha = 8.0;
  if (which == BenchModel::kTiny) {
    s.name = "tiny";
    s.model_dir = default_model_dir();
    s.width = 256;
    s.height = 160;
  } else {
    s.name = "medium";
    s.model_dir = scratch + "/medium";
    write_random_model(s.model_dir, medium_spec(), 11);
    s.width = 320;
    s.height = 192;
    lora_rank = 16;
    lora_alpha = 16.0;
  }
  EngineOptions eo;
  eo.model_dir = s.model_dir;
  eo.ranks = ranks;
  s.engine = Engine::open(eo);
  s.lora = scratch + "/" + s.name + "-lora";
  dit::write_random_lora(s.lora, s.engine->model().dit, lora_rank, lora_alpha, 5);
  return s;
}

void ArrivalSink::on_chunk(const Chunk& c) {
  if (!c.frames.defined()) {
    if (c.audio.defined()) {
      if (c.first_sample != samples && audio_gap < 0) audio_gap = samples;
      samples += c.audio.size(0);
    }
    return;
  }
  arrivals.push_back(seconds_since(t0_));
  frames += c.frames.size(0);
  if (sample_rss_) rss.push_back(status_mib("VmRSS:"));
  if (control_ && finish_after_ > 0 && static_cast<int64_t>(arrivals.size()) == finish_after_)
    control_->finish();
  if (on_arrival) on_arrival();
}

double ArrivalSink::mean_period() const {
  if (arrivals.size() < 2) return 0;
  return (arrivals.back() - arrivals.front()) / static_cast<double>(arrivals.size() - 1);
}

double ArrivalSink::median_period() const {
  std::vector<double> p;
  for (size_t i = 1; i < arrivals.size(); ++i) p.push_back(arrivals[i] - arrivals[i - 1]);
  if (p.empty()) return 0;
  std::sort(p.begin(), p.end());
  return p[p.size() / 2];
}

double ArrivalSink::rss_over(size_t begin) const {
  double m = 0;
  for (size_t i = begin; i < std::min(rss.size(), begin + 10); ++i) m = std::max(m, rss[i]);
  return m;
}

}  // namespace h3::tools
