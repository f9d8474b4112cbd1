#include "tools/dit_inputs_file.h"

#include <ATen/ATen.h>

#include "h3/error.h"
#include "io/safetensors.h"

namespace h3::tools {

dit::DitInputs read_dit_inputs(const std::string& path) {
  auto f = io::SafetensorsFile::open(path);
  auto get = [&](const char* name) { return f->view(name).clone(); };
  auto scalar = [&](const char* name) {
    auto t = get(name);
    if (t.numel() != 1) {
      throw Error(ErrorKind::kInvalidArgument,
                  path + ": '" + name + "' must be a 0-d timestep t = 1 - sigma");
    }
    return t.to(at::kFloat).item<float>();
  };
  dit::DitInputs in;
  in.video = get("video");
  in.audio = get("audio");
  in.text = get("text");
  if (f->find("tags")) in.text_tags = get("tags");
  in.t_video = scalar("t_video");
  in.t_audio = scalar("t_audio");
  return in;
}

}  // namespace h3::tools
