// The shared token of a process world (docs/distributed.md, "The token"): a file only its owner
// may read, holding one line. Read without following a link, without blocking on a FIFO or a
// device, and with every check on the descriptor that is read (no check-then-open race).
#pragma once

#include <string>

namespace h3::dist {

// The token files are small: one line of at least kMinTokenChars characters.
constexpr size_t kMinTokenChars = 16;
constexpr size_t kMaxTokenFileBytes = 4096;

// Reads the shared token: the file's first line without surrounding whitespace. Throws
// h3::Error naming the file: kNotFound (missing or unreadable), kInvalidArgument when it is a
// symbolic link, not a regular file, larger than 4 KiB, has any permission bit for its group or
// others (0640, 0604, 0620, 0610, ...: only owner-only modes such as 0600, 0400, 0700 pass; the
// message names the mode and says "chmod 600 FILE"), or when the token is shorter than 16 characters.
std::string read_token_file(const std::string& path);

}  // namespace h3::dist
