// RIFF WAVE writer for decoded waveforms (little-endian fields written byte by byte, so the
// file is the same on any host).
#include <ATen/ATen.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "audio/audio_decoder.h"
#include "h3/error.h"

namespace h3::audio {
namespace {

void put_u16(std::vector<uint8_t>& b, uint32_t v) {
  b.push_back(static_cast<uint8_t>(v & 0xff));
  b.push_back(static_cast<uint8_t>((v >> 8) & 0xff));
}

void put_u32(std::vector<uint8_t>& b, uint32_t v) {
  put_u16(b, v & 0xffff);
  put_u16(b, v >> 16);
}

void put_tag(std::vector<uint8_t>& b, const char* tag) {
  b.insert(b.end(), tag, tag + 4);
}

}  // namespace

void write_wav(const std::filesystem::path& path, const at::Tensor& waveform, int sample_rate,
               WavFormat format) {
  if (!waveform.defined() || waveform.dim() != 2 || waveform.size(0) < 1 || waveform.size(0) > 16) {
    throw Error(ErrorKind::kInvalidArgument,
                path.string() + ": a WAV file needs a waveform [channels, samples] with 1 to 16 channels");
  }
  if (sample_rate <= 0)
    throw Error(ErrorKind::kInvalidArgument, path.string() + ": the sample rate must be positive");
  const bool is_float = format == WavFormat::kFloat32;
  const uint32_t channels = static_cast<uint32_t>(waveform.size(0));
  const uint32_t bytes_per_sample = is_float ? 4 : 2;
  // Interleaved frames: [samples, channels].
  const at::Tensor frames = waveform.to(at::kCPU, at::kFloat).t().contiguous();
  const uint64_t data_bytes = static_cast<uint64_t>(frames.numel()) * bytes_per_sample;
  const uint32_t fmt_size = is_float ? 18 : 16;  // IEEE float carries cbSize (0)
  const uint64_t riff_size = 4 + (8 + fmt_size) + (is_float ? 12 : 0) + 8 + data_bytes;
  if (riff_size > std::numeric_limits<uint32_t>::max()) {
    throw Error(ErrorKind::kInvalidArgument,
                path.string() + ": the waveform is too long for a WAV file (4 GiB)");
  }
  std::vector<uint8_t> b;
  b.reserve(64 + data_bytes);
  put_tag(b, "RIFF");
  put_u32(b, static_cast<uint32_t>(riff_size));
  put_tag(b, "WAVE");
  put_tag(b, "fmt ");
  put_u32(b, fmt_size);
  put_u16(b, is_float ? 3 : 1);  // WAVE_FORMAT_IEEE_FLOAT / WAVE_FORMAT_PCM
  put_u16(b, channels);
  put_u32(b, static_cast<uint32_t>(sample_rate));
  put_u32(b, static_cast<uint32_t>(sample_rate) * channels * bytes_per_sample);  // byte rate
  put_u16(b, channels * bytes_per_sample);                                       // block align
  put_u16(b, bytes_per_sample * 8);
  if (is_float) {
    put_u16(b, 0);  // cbSize
    put_tag(b, "fact");
    put_u32(b, 4);
    put_u32(b, static_cast<uint32_t>(frames.size(0)));  // samples per channel
  }
  put_tag(b, "data");
  put_u32(b, static_cast<uint32_t>(data_bytes));
  const float* x = frames.data_ptr<float>();
  for (int64_t i = 0; i < frames.numel(); ++i) {
    if (is_float) {
      uint32_t bits = 0;
      std::memcpy(&bits, &x[i], 4);
      put_u32(b, bits);
    } else {
      const float v = std::isnan(x[i]) ? 0.0f : std::min(1.0f, std::max(-1.0f, x[i]));
      put_u16(b, static_cast<uint16_t>(static_cast<int16_t>(std::lround(v * 32767.0f))));
    }
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f)
    throw Error(ErrorKind::kNotFound,
                path.string() + ": cannot create the WAV file (does its folder exist?)");
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!f) throw Error(ErrorKind::kNotFound, path.string() + ": writing the WAV file failed (disk full?)");
}

}  // namespace h3::audio
