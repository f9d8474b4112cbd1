#include "tools/y4m_writer.h"

#include <ATen/ATen.h>

#include <cerrno>
#include <cstring>

#include "h3/error.h"

namespace h3 {

std::string Y4mWriter::header(int64_t width, int64_t height, int fps_n, int fps_d) {
  return "YUV4MPEG2 W" + std::to_string(width) + " H" + std::to_string(height) + " F" +
         std::to_string(fps_n) + ":" + std::to_string(fps_d) + " Ip A1:1 C444\n";
}

at::Tensor Y4mWriter::rgb_to_yuv444(const at::Tensor& rgb_u8) {
  // fp32 matrix product on [0, 255] values; coefficients of BT.601 scaled to 8-bit limited range.
  const at::Tensor m = at::tensor({65.481f, 128.553f, 24.966f,  //
                                   -37.797f, -74.203f, 112.0f,  //
                                   112.0f, -93.786f, -18.214f})
                           .view({3, 3})
                           .div_(255.0f);
  const at::Tensor offset = at::tensor({16.0f, 128.0f, 128.0f});
  at::Tensor yuv = at::matmul(rgb_u8.to(at::kFloat), m.t()) + offset;  // [n, H, W, 3]
  yuv = yuv.round_().clamp_(0.0, 255.0).to(at::kByte);
  return yuv.permute({0, 3, 1, 2}).contiguous();  // planar: Y, then Cb, then Cr per frame
}

Y4mWriter::Y4mWriter(const std::string& path, int64_t width, int64_t height, int fps_n, int fps_d)
    : path_(path), width_(width), height_(height) {
  if (width < 1 || height < 1 || fps_n < 1 || fps_d < 1) {
    throw Error(ErrorKind::kInvalidArgument, path + ": y4m needs a positive size and frame rate");
  }
  if (path == "-") {
    f_ = stdout;
  } else {
    f_ = std::fopen(path.c_str(), "wb");
    owned_ = true;
    if (!f_) {
      throw Error(ErrorKind::kNotFound, path + ": cannot open for writing: " + std::strerror(errno));
    }
  }
  const std::string h = header(width, height, fps_n, fps_d);
  if (std::fwrite(h.data(), 1, h.size(), f_) != h.size() || std::fflush(f_) != 0) {
    throw Error(ErrorKind::kInternal, path + ": write failed: " + std::strerror(errno));
  }
}

Y4mWriter::~Y4mWriter() {
  if (f_ && owned_) std::fclose(f_);
}

void Y4mWriter::write(const at::Tensor& rgb_u8) {
  if (!f_) throw Error(ErrorKind::kInternal, path_ + ": written after close");
  if (rgb_u8.dim() != 4 || rgb_u8.size(1) != height_ || rgb_u8.size(2) != width_ || rgb_u8.size(3) != 3 ||
      rgb_u8.scalar_type() != at::kByte) {
    throw Error(ErrorKind::kInvalidArgument, path_ + ": frames must be uint8 [n, " + std::to_string(height_) +
                                                 ", " + std::to_string(width_) + ", 3]");
  }
  const at::Tensor yuv = rgb_to_yuv444(rgb_u8.cpu());
  const size_t frame_bytes = static_cast<size_t>(3 * width_ * height_);
  static const char kFrame[] = "FRAME\n";
  for (int64_t i = 0; i < yuv.size(0); ++i) {
    const auto* p = static_cast<const unsigned char*>(yuv[i].data_ptr());
    if (std::fwrite(kFrame, 1, 6, f_) != 6 || std::fwrite(p, 1, frame_bytes, f_) != frame_bytes) {
      throw Error(ErrorKind::kInternal, path_ + ": write failed: " + std::strerror(errno));
    }
    ++frames_;
  }
  if (std::fflush(f_) != 0)
    throw Error(ErrorKind::kInternal, path_ + ": write failed: " + std::strerror(errno));
}

void Y4mWriter::close() {
  if (!f_) return;
  const bool ok = std::fflush(f_) == 0;
  const int rc = owned_ ? std::fclose(f_) : 0;
  f_ = nullptr;
  if (!ok || rc != 0)
    throw Error(ErrorKind::kInternal, path_ + ": could not finish writing: " + std::strerror(errno));
}

}  // namespace h3
