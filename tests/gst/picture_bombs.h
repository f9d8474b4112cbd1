// Small files that decode to huge pictures, and what a test needs to show that they were refused
// before anything was decoded: GStreamer's allocations counted, and the process's peak memory.
#pragma once

#include <gst/gst.h>

#include <cstdint>
#include <string>

namespace h3test {

// A PNG of width x height black RGB pixels, as small as zlib makes it (16384 x 16384: about
// 1.1 MB for 805 MB of pixels). Built from one row's compressed bytes repeated: each row is
// compressed with a full flush, which makes its bytes independent of the rows before it.
std::string black_png(int width, int height);

// `jpeg` (a baseline JPEG) with the size in its SOF0 header replaced: the scan data no longer
// fits, but a decoder would allocate for the new size before it noticed.
std::string jpeg_claiming(const std::string& jpeg, int width, int height);

// Makes GStreamer's default allocator one that counts (the system memory allocator does the work):
// every buffer allocated without naming an allocator — a decoder's frames, a video pool's — is
// seen. Call once, after gst_init.
void count_gst_allocations();
// The largest allocation since the last reset, in bytes.
uint64_t largest_gst_allocation();
void reset_gst_allocations();

// The peak resident memory of this process (VmHWM) since the last reset_peak_rss, in KiB.
int64_t peak_rss_kib();
void reset_peak_rss();

void write_file(const std::string& path, const std::string& bytes);

}  // namespace h3test
