#include "h3/prompt_timeline.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

#include "h3/error.h"

namespace h3 {

std::vector<TimedPrompt> parse_prompt_timeline(const std::string& text, const std::string& origin) {
  std::vector<TimedPrompt> out;
  // A UTF-8 byte order mark (what some Windows editors write first) is not part of line 1.
  const bool bom = text.rfind("\xEF\xBB\xBF", 0) == 0;
  std::istringstream in(bom ? text.substr(3) : text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto bad = [&](const std::string& why) {
      return Error(ErrorKind::kInvalidArgument, origin + ":" + std::to_string(n) + ": " + why +
                                                    " (each line: SECONDS PROMPT, times increasing from 0)");
    };
    const size_t gap = line.find_first_of(" \t", first);
    if (gap == std::string::npos) throw bad("no prompt after the time");
    const std::string secs = line.substr(first, gap - first);
    // Decimal seconds whatever the process's locale (an application may have set one with a
    // decimal comma); no hexadecimal, no sign.
    double t = 0;
    const auto [end, ec] =
        std::from_chars(secs.data(), secs.data() + secs.size(), t, std::chars_format::general);
    if (ec != std::errc() || end != secs.data() + secs.size() || !std::isfinite(t) || t < 0)
      throw bad("'" + secs + "' is not a time in seconds");
    std::string prompt = line.substr(line.find_first_not_of(" \t", gap) == std::string::npos
                                         ? line.size()
                                         : line.find_first_not_of(" \t", gap));
    while (!prompt.empty() && (prompt.back() == '\r' || prompt.back() == ' ' || prompt.back() == '\t'))
      prompt.pop_back();
    if (prompt.empty()) throw bad("no prompt after the time");
    if (!out.empty() && t <= out.back().seconds)
      throw bad("the time " + secs + " does not follow the line before");
    out.push_back({t, prompt});
  }
  // An empty timeline is a mistake (the wrong file, or every line commented out), not a request
  // without changes: that is no timeline at all.
  if (out.empty()) {
    throw Error(ErrorKind::kInvalidArgument,
                origin +
                    ": the prompt timeline has no entry (only blank lines and # comments); each line: "
                    "SECONDS PROMPT, times increasing from 0");
  }
  return out;
}

std::vector<TimedPrompt> read_prompt_timeline(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw Error(ErrorKind::kNotFound, "prompt timeline " + path + " cannot be read");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_prompt_timeline(text.str(), path);
}

}  // namespace h3
