// A RIFF WAVE reader for the tests, written apart from the project's writer (core/audio/wav.cpp)
// so that what a command wrote is read back independently: PCM16 or IEEE float32, any channel
// count, chunks in any order (fmt, fact, data, others skipped).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace h3::test {

struct Wav {
  int format = 0;  // 1: PCM, 3: IEEE float
  int channels = 0;
  int rate = 0;
  int bits = 0;
  at::Tensor samples;  // [channels, frames], fp32; PCM16 scaled by 1/32768
};

inline Wav read_wav(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), {});
  auto u16 = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<uint8_t>(b.at(at))) |
           static_cast<uint32_t>(static_cast<uint8_t>(b.at(at + 1))) << 8;
  };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  if (b.size() < 12 || b.compare(0, 4, "RIFF") != 0 || b.compare(8, 4, "WAVE") != 0) {
    throw std::runtime_error(path + ": not a RIFF WAVE file");
  }
  if (u32(4) != b.size() - 8) throw std::runtime_error(path + ": the RIFF size is not the file's");
  Wav w;
  for (size_t at = 12; at + 8 <= b.size();) {
    const std::string id = b.substr(at, 4);
    const size_t size = u32(at + 4), body = at + 8;
    if (body + size > b.size()) throw std::runtime_error(path + ": chunk '" + id + "' runs past the end");
    if (id == "fmt ") {
      w.format = static_cast<int>(u16(body));
      w.channels = static_cast<int>(u16(body + 2));
      w.rate = static_cast<int>(u32(body + 4));
      w.bits = static_cast<int>(u16(body + 14));
    } else if (id == "data") {
      if (w.channels == 0) throw std::runtime_error(path + ": data before fmt");
      const int64_t frames = static_cast<int64_t>(size) / (w.channels * w.bits / 8);
      at::Tensor interleaved;
      if (w.format == 3 && w.bits == 32) {
        interleaved = at::empty({frames, w.channels}, at::kFloat);
        std::memcpy(interleaved.data_ptr(), b.data() + body, static_cast<size_t>(interleaved.nbytes()));
      } else if (w.format == 1 && w.bits == 16) {
        interleaved = at::empty({frames, w.channels}, at::kShort);
        std::memcpy(interleaved.data_ptr(), b.data() + body, static_cast<size_t>(interleaved.nbytes()));
        interleaved = interleaved.to(at::kFloat) / 32768.0;
      } else {
        throw std::runtime_error(path + ": format " + std::to_string(w.format) + " at " +
                                 std::to_string(w.bits) + " bits");
      }
      w.samples = interleaved.t().contiguous();
    }
    at = body + size + (size & 1);
  }
  if (!w.samples.defined()) throw std::runtime_error(path + ": no data chunk");
  return w;
}

}  // namespace h3::test
