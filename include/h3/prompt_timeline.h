// A prompt timeline as a file: one prompt per line, `SECONDS PROMPT` (decimal seconds into the
// clip, a space or tab, the prompt to the end of the line); blank lines and lines starting with
// `#` are skipped; CRLF line ends and a leading UTF-8 byte order mark are read as well. What
// `h3 generate --prompt-timeline` and the elements' `prompt-timeline` read (docs/causal.md
// "Live"). Torch-free: the plugin links it.
#pragma once

#include <string>
#include <vector>

#include "h3/request.h"

namespace h3 {

// Throws h3::Error(kNotFound) when `path` cannot be read, kInvalidArgument naming the file and
// line for a line that is not `SECONDS PROMPT` (decimal seconds, >= 0) or times that do not
// increase, and naming the file for one without any entry. `origin` names the text in errors.
std::vector<TimedPrompt> read_prompt_timeline(const std::string& path);
std::vector<TimedPrompt> parse_prompt_timeline(const std::string& text, const std::string& origin);

}  // namespace h3
