#include "tools/progress_bar.h"

#include <unistd.h>

#include <string>

namespace h3::tools {

ProgressPrinter::ProgressPrinter(int tty, std::FILE* out)
    : out_(out), tty_(tty < 0 ? ::isatty(::fileno(out)) != 0 : tty != 0) {}

void ProgressPrinter::operator()(const Progress& p) {
  int64_t done = 0, total = 0;
  std::string unit;
  switch (p.phase) {
    case Phase::kLoading: done = p.step, total = p.total_steps, unit = "parts"; break;
    case Phase::kConditioning: break;
    case Phase::kDenoising: done = p.step, total = p.total_steps, unit = "steps"; break;
    case Phase::kDecoding: done = p.chunk, total = p.total_chunks, unit = "chunks"; break;
    case Phase::kDone: done = p.frames, total = p.total_frames, unit = "frames"; break;
    case Phase::kPrompt: break;
    case Phase::kSteps: break;
  }
  char counts[96] = "";
  if (total > 0)
    std::snprintf(counts, sizeof counts, " %lld/%lld %s", (long long)done, (long long)total, unit.c_str());
  // A prompt change has no total: the chunk it applies from is the news.
  if (p.phase == Phase::kPrompt) std::snprintf(counts, sizeof counts, " from chunk %lld", (long long)p.chunk);
  if (p.phase == Phase::kSteps) {
    std::snprintf(counts, sizeof counts, " %lld per chunk from chunk %lld", (long long)p.chunk_steps,
                  (long long)p.chunk);
  }
  char frames[64] = "";
  if (p.phase == Phase::kDecoding) {
    std::snprintf(frames, sizeof frames, ", %lld/%lld frames", (long long)p.frames,
                  (long long)p.total_frames);
  }
  if (!tty_) {
    std::fprintf(out_, "h3: %s%s%s (%.2f s)\n", to_string(p.phase), counts, frames, p.elapsed_s);
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 30;
  const int filled =
      total > 0 ? static_cast<int>(kWidth * done / total) : (p.phase == Phase::kDone ? kWidth : 0);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '-');
  std::fprintf(out_, "\r\033[K%-12s [%s]%s%s %.1fs", to_string(p.phase), bar.c_str(), counts, frames,
               p.elapsed_s);
  open_line_ = true;
  if (p.phase == Phase::kDone || (p.phase == Phase::kLoading && total > 0 && done == total)) {
    std::fputc('\n', out_);
    open_line_ = false;
  }
  std::fflush(out_);
}

void ProgressPrinter::finish() {
  if (tty_ && open_line_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
  open_line_ = false;
}

}  // namespace h3::tools
