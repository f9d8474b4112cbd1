#include "h3/error.h"

namespace h3 {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid argument";
    case ErrorKind::kNotFound: return "not found";
    case ErrorKind::kFormat: return "format error";
    case ErrorKind::kMismatch: return "mismatch";
    case ErrorKind::kDistributed: return "distributed error";
    case ErrorKind::kCancelled: return "cancelled";
    case ErrorKind::kCallback: return "consumer error";
    case ErrorKind::kInternal: return "internal error";
    case ErrorKind::kOutOfMemory: return "out of memory";
  }
  return "error";
}

}  // namespace h3
