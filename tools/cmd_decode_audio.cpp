// `h3 decode-audio`: the DiT's audio rows in a safetensors file -> a stereo waveform.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "audio/audio_decoder.h"
#include "common/device.h"
#include "h3/error.h"
#include "io/safetensors.h"
#include "tools/command.h"

namespace h3::tools {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The rows tensor: `audio` (as `h3 generate --save-latents` writes it) or `latents_rows`.
at::Tensor read_rows(const std::string& path) {
  const auto file = io::SafetensorsFile::open(path);
  for (const char* name : {"audio", "latents_rows"}) {
    if (file->find(name)) return file->view(name);
  }
  throw Error(ErrorKind::kNotFound,
              path +
                  ": no tensor 'audio' or 'latents_rows' (the DiT's audio rows [2·A, 32], "
                  "as `h3 generate --save-latents` writes them)");
}

int run_decode_audio(Args& a) {
  const std::string vae_dir = a.string("audio-vae");
  const std::string rows_path = a.string("rows");
  const std::string out_path = a.string("out");
  const bool pcm16 = a.flag("pcm16");
  const std::string device_name = a.string_or("device", "cpu");
  a.finish();
  if (!a.positional().empty()) throw UsageError{"unexpected argument '" + a.positional().front() + "'"};
  const bool wav = ends_with(out_path, ".wav") || ends_with(out_path, ".WAV");
  if (pcm16 && !wav) throw UsageError{"--pcm16 applies to a .wav output only"};
  const c10::Device device = parse_device(device_name, "--device");

  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor rows = read_rows(rows_path);
  audio::AudioDecoder decoder = audio::AudioDecoder::load(vae_dir);
  if (device.is_cuda()) decoder = decoder.to(device);
  at::Tensor waveform;
  try {
    waveform = decoder.decode(rows);
  } catch (const Error& e) {
    throw Error(e.kind(), rows_path + ": " + e.what());
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (wav) {
    audio::write_wav(out_path, waveform, decoder.sample_rate(),
                     pcm16 ? audio::WavFormat::kPcm16 : audio::WavFormat::kFloat32);
  } else {
    io::write_safetensors(out_path, {{"waveform", waveform}},
                          {{"sample_rate", std::to_string(decoder.sample_rate())},
                           {"audio_vae", vae_dir},
                           {"rows", rows_path}});
  }
  const double audio_seconds = static_cast<double>(waveform.size(1)) / decoder.sample_rate();
  std::fprintf(stderr,
               "h3 decode-audio: wrote %s: %lld latents -> 2 x %lld samples (%.3f s at %d Hz) in %.2f s\n",
               out_path.c_str(), static_cast<long long>(rows.size(0) / 2),
               static_cast<long long>(waveform.size(1)), audio_seconds, decoder.sample_rate(), seconds);
  return 0;
}

H3_REGISTER_COMMAND("decode-audio", "decode the DiT's audio rows to a waveform with the H3 audio VAE",
                    "usage: h3 decode-audio --audio-vae DIR --rows FILE --out FILE [--pcm16]\n"
                    "                       [--device cpu|cuda|cuda:K]\n"
                    "\n"
                    "Decodes the DiT's audio rows (tensor `audio`, as `h3 generate --save-latents` writes\n"
                    "it, or `latents_rows`: [2·A, 32], the left channel's A rows first) with the audio VAE\n"
                    "in DIR: the release's native audio_vae/ folder (config.json naming config.yaml,\n"
                    "metadata.json and model.safetensors) or a diffusers one (config.json +\n"
                    "diffusion_pytorch_model.safetensors). The waveform is 800·A samples per channel at\n"
                    "32 kHz, clamped to [-1, 1], decoded in fp32.\n"
                    "\n"
                    "  --audio-vae DIR  the audio VAE folder\n"
                    "  --rows FILE      safetensors file holding `audio` or `latents_rows`\n"
                    "  --out FILE       a .wav name writes a stereo WAV file (32-bit float); any other\n"
                    "                   name a safetensors file with `waveform` float32 [2, 800·A]\n"
                    "  --pcm16          write the WAV file as 16-bit PCM instead\n"
                    "  --device D       cpu (default), cuda or cuda:K",
                    run_decode_audio);

}  // namespace
}  // namespace h3::tools
