// libFuzzer target for the prompt timeline's parser (h3/prompt_timeline.h), which reads a
// file the user names (`h3 generate --prompt-timeline`, the elements' `prompt-timeline`). Any
// byte string must either give entries the engine accepts (at least one; finite, non-negative,
// strictly increasing times; non-empty prompts of one line, without leading blanks or trailing
// blanks and CR) or be refused with an h3::Error that names the origin first. A crash, a
// sanitizer report, another exception or a broken invariant is a bug.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "h3/error.h"
#include "h3/prompt_timeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<h3::TimedPrompt> t;
  try {
    t = h3::parse_prompt_timeline(text, "fuzz.txt");
  } catch (const h3::Error& e) {
    if (e.kind() != h3::ErrorKind::kInvalidArgument) std::abort();
    if (std::string(e.what()).rfind("fuzz.txt:", 0) != 0) std::abort();  // names the file first
    return 0;
  }
  if (t.empty()) std::abort();
  double last = -1;
  for (const h3::TimedPrompt& e : t) {
    if (!std::isfinite(e.seconds) || e.seconds < 0 || e.seconds <= last) std::abort();
    last = e.seconds;
    const std::string& p = e.prompt;
    if (p.empty() || p.find('\n') != std::string::npos) std::abort();
    if (p.front() == ' ' || p.front() == '\t') std::abort();
    if (p.back() == ' ' || p.back() == '\t' || p.back() == '\r') std::abort();
    // The prompt is the line's own bytes.
    if (text.find(p) == std::string::npos) std::abort();
  }
  return 0;
}
