// Error types shared by the whole engine.
//
// Every error a user can cause says what was wrong and what to do about it, and
// names the file, tensor, property or rank involved. The kinds let callers (the
// GStreamer element, the CLI) map an error to the right domain and exit code
// without parsing messages.
#pragma once

#include <stdexcept>
#include <string>

namespace h3 {

enum class ErrorKind {
  kInvalidArgument,  // a request, option or property the engine cannot honour
  kNotFound,         // a file, folder or tensor that is not there
  kFormat,           // a file that is there but malformed (header, JSON, shapes)
  kMismatch,         // weights that disagree with their config, or ranks with each other
  kDistributed,      // a collective failed, timed out, or a peer rank failed
  kCancelled,        // the request was cancelled (flush, state change)
  kCallback,         // a consumer (ChunkSink) threw
  kInternal,         // a broken invariant inside the engine
  kOutOfMemory,      // a request whose estimated peak memory exceeds what is available (or max-memory)
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace h3
