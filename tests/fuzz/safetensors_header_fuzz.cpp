// libFuzzer target for the safetensors header parser: any byte string must
// either parse into a header whose every span is safe to view, or be refused
// with an h3::Error. Anything else (a crash, a sanitizer report, another
// exception, a broken invariant) is a bug.
#include <cstdint>
#include <cstdlib>
#include <exception>

#include "h3/error.h"
#include "io/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  h3::io::ParsedHeader h;
  try {
    h = h3::io::parse_safetensors_header(data, size, "fuzz-input");
  } catch (const h3::Error&) {
    return 0;
  }
  if (h.data_offset + h.data_size != size) std::abort();
  uint64_t prev_end = 0;
  for (const auto& t : h.tensors) {
    if (t.begin > t.end || t.end > h.data_size) std::abort();
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) std::abort();
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * c10::elementSize(t.dtype) != t.end - t.begin) std::abort();
    if (t.begin != t.end) {
      if (t.begin < prev_end) std::abort();  // sorted, non-overlapping
      prev_end = t.end;
    }
    // Touch the first and last byte of the span: out-of-range reads show under ASan.
    if (t.end > t.begin) {
      volatile uint8_t a = data[h.data_offset + t.begin];
      volatile uint8_t b = data[h.data_offset + t.end - 1];
      (void)a;
      (void)b;
    }
  }
  return 0;
}
