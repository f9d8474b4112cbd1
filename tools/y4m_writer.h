// YUV4MPEG2 output for `h3 generate`: a header, then one FRAME per picture, written as frames
// arrive so that a reader (ffprobe, ffplay, gst y4mdec) can follow a growing file or a pipe.
//
// Colour: the header says C444 (no chroma subsampling, so no chroma siting to get wrong and no
// even-size requirement). YUV4MPEG2 has no colour-matrix field; readers (FFmpeg, GStreamer's
// y4mdec) take such 8-bit YCbCr as BT.601 limited ("TV") range, so that is what is written:
//   Y  = 16  + ( 65.481 R + 128.553 G +  24.966 B)
//   Cb = 128 + (-37.797 R -  74.203 G + 112.0   B)
//   Cr = 128 + (112.0   R -  93.786 G -  18.214 B)      with R, G, B in [0, 1]
// rounded to the nearest integer (Y in 16..235, Cb/Cr in 16..240).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace h3 {

class Y4mWriter {
 public:
  // Opens `path` for writing ("-" = stdout). Throws h3::Error(kNotFound) when it cannot.
  Y4mWriter(const std::string& path, int64_t width, int64_t height, int fps_n, int fps_d);
  ~Y4mWriter();
  Y4mWriter(const Y4mWriter&) = delete;
  Y4mWriter& operator=(const Y4mWriter&) = delete;

  // Appends uint8 RGB frames [n, height, width, 3] and flushes. Throws h3::Error
  // (kInvalidArgument for a wrong shape, kInternal for a write error naming the file).
  void write(const at::Tensor& rgb_u8);
  int64_t frames_written() const { return frames_; }
  // Flushes and closes; throws if the data did not reach the file.
  void close();

  // The header line the writer emits, e.g. "YUV4MPEG2 W96 H64 F24:1 Ip A1:1 C444\n".
  static std::string header(int64_t width, int64_t height, int fps_n, int fps_d);
  // RGB [n, H, W, 3] uint8 -> planar YUV 4:4:4 [n, 3, H, W] uint8 (BT.601 limited range).
  static at::Tensor rgb_to_yuv444(const at::Tensor& rgb_u8);

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  bool owned_ = false;
  int64_t width_, height_;
  int64_t frames_ = 0;
};

}  // namespace h3
