// Progress of `h3` commands on stderr: a bar redrawn in place when stderr is a terminal, one
// plain line per report otherwise (logs, CI, pipes).
#pragma once

#include <cstdio>

#include "h3/progress.h"

namespace h3::tools {

class ProgressPrinter {
 public:
  // tty: -1 = ask isatty(stderr).
  explicit ProgressPrinter(int tty = -1, std::FILE* out = stderr);
  void operator()(const Progress& p);
  // Ends a bar line (no-op for plain lines).
  void finish();
  ProgressFn fn() {
    return [this](const Progress& p) { (*this)(p); };
  }

 private:
  std::FILE* out_;
  bool tty_;
  bool open_line_ = false;
};

}  // namespace h3::tools
