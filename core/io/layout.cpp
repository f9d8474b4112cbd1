#include "io/layout.h"

#include <cctype>
#include <utility>

#include "h3/error.h"

namespace h3::io {
namespace {

bool starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

// Matches "<prefix><digits>.<rest>", giving the digits and the rest.
bool match_indexed(const std::string& s, const std::string& prefix, std::string* index, std::string* rest) {
  if (!starts_with(s, prefix)) return false;
  size_t i = prefix.size(), j = i;
  while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
  if (j == i || j >= s.size() || s[j] != '.') return false;
  *index = s.substr(i, j - i);
  *rest = s.substr(j + 1);
  return true;
}

// First matching prefix rename; true when one applied.
template <size_t N>
bool rename(const std::string& s, const std::pair<const char*, const char*> (&table)[N], std::string* out) {
  for (const auto& [from, to] : table) {
    if (starts_with(s, from)) {
      *out = to + s.substr(std::char_traits<char>::length(from));
      return true;
    }
  }
  return false;
}

std::vector<CanonicalPiece> qkv(const std::string& base, const std::string& suffix) {
  return {{base + "to_q." + suffix, Rearrange::kQkvPart, 0},
          {base + "to_k." + suffix, Rearrange::kQkvPart, 1},
          {base + "to_v." + suffix, Rearrange::kQkvPart, 2}};
}

[[noreturn]] void unknown(const std::string& name, const char* model) {
  throw Error(ErrorKind::kFormat,
              "native " + std::string(model) + " tensor '" + name +
                  "' has no known diffusers name; is this an H3 checkpoint of that model?");
}

// One DiT block (refiner or main), `base` being its canonical prefix.
std::vector<CanonicalPiece> dit_block(const std::string& native, const std::string& base,
                                      const std::string& rest) {
  static const std::pair<const char*, const char*> kRenames[] = {
      {"norm1.", "norm1."},
      {"norm2.", "norm2."},
      {"attn.q_norm.", "attn.norm_q."},
      {"attn.k_norm.", "attn.norm_k."},
      {"attn.out_proj.", "attn.to_out.0."},
      {"mlp.fc2.", "ff.net.2."},
      {"adaln_proj.linear.", "adaln_proj.linear."},
  };
  if (starts_with(rest, "attn.qkv_proj.")) return qkv(base + "attn.", rest.substr(14));
  if (starts_with(rest, "mlp.fc1."))
    return {{base + "ff.net.0.proj." + rest.substr(8), Rearrange::kSwapHalves}};
  std::string out;
  if (rename(rest, kRenames, &out)) return {{base + out}};
  unknown(native, "DiT");
}

std::vector<CanonicalPiece> dit(const std::string& n) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"video_patch_proj.", "proj_in."},
      {"audio_patch_proj.", "audio_proj_in."},
      {"condition_proj.", "context_embedder."},
      {"time_embedder.proj_in.", "time_embedder.linear_1."},
      {"time_embedder.proj_out.", "time_embedder.linear_2."},
      {"final_layer.norm.", "norm_out.norm."},
      {"final_layer.adaln_proj.linear.", "norm_out.linear."},
      {"final_layer.video_out.", "proj_out."},
      {"final_layer.audio_out.", "audio_proj_out."},
      {"token_refiner.final_norm.", "token_refiner.final_norm."},
  };
  if (n == "rope.inv_freq") return {};  // derived from the config at run time
  std::string idx, rest, out;
  if (match_indexed(n, "token_refiner.blocks.", &idx, &rest)) {
    return dit_block(n, "token_refiner.refiner_blocks." + idx + ".", rest);
  }
  if (match_indexed(n, "blocks.", &idx, &rest)) return dit_block(n, "transformer_blocks." + idx + ".", rest);
  if (rename(n, kTop, &out)) return {{out}};
  unknown(n, "DiT");
}

std::vector<CanonicalPiece> vae(const std::string& n) {
  std::string idx, rest, out;
  if (n == "decoder.mask_token") return {};  // training-only buffer
  if (match_indexed(n, "decoder.transformer_blocks.", &idx, &rest)) {
    const std::string base = "decoder.transformer_blocks." + idx + ".";
    static const std::pair<const char*, const char*> kBlock[] = {
        {"attn.to_out.", "attn.to_out.0."},
        {"ff.w2.", "ff.net.2."},
        {"norm1.", "norm1."},
        {"norm2.", "norm2."},
        {"scale1", "scale1"},
        {"scale2", "scale2"},
    };
    if (starts_with(rest, "attn.to_qkv.")) return qkv(base + "attn.", rest.substr(12));
    if (starts_with(rest, "ff.w1."))
      return {{base + "ff.net.0.proj." + rest.substr(6), Rearrange::kSwapHalves}};
    if (rename(rest, kBlock, &out)) return {{base + out}};
    unknown(n, "video-VAE");
  }
  static const std::pair<const char*, const char*> kDecoder[] = {
      {"decoder.x_embedder.", "decoder.proj_in."},
      {"decoder.register_tokens", "decoder.register_tokens"},
      {"decoder.norm_out.", "decoder.norm_out."},
      {"decoder.proj_out.", "decoder.proj_out."},
  };
  if (starts_with(n, "decoder.")) {
    if (rename(n, kDecoder, &out)) return {{out}};
    unknown(n, "video-VAE");
  }
  // Encoder: renames from the release's diffusers index (docs/h3-model.md §10.2). The
  // native encoder file was never inspected, so unmatched names pass through.
  std::string j, rest2;
  if (match_indexed(n, "encoder.down.", &idx, &rest)) {
    const std::string base = "encoder.down_blocks." + idx + ".";
    if (match_indexed(rest, "block.", &j, &rest2)) {
      if (starts_with(rest2, "nin_shortcut."))
        return {{base + "resnets." + j + ".conv_shortcut." + rest2.substr(13)}};
      return {{base + "resnets." + j + "." + rest2}};
    }
    if (starts_with(rest, "downsample.conv.")) return {{base + "downsamplers.0.conv." + rest.substr(16)}};
    if (starts_with(rest, "downsample.")) return {{base + "downsamplers.0.conv." + rest.substr(11)}};
  }
  return {{n}};
}

}  // namespace

bool is_native_layout(ModelKind kind, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (kind == ModelKind::kDit) {
      if (starts_with(n, "blocks.") || starts_with(n, "token_refiner.blocks.") ||
          starts_with(n, "final_layer.") || starts_with(n, "video_patch_proj.")) {
        return true;
      }
    } else {
      if (n.find(".attn.to_qkv.") != std::string::npos || n.find(".ff.w1.") != std::string::npos ||
          starts_with(n, "decoder.x_embedder.")) {
        return true;
      }
    }
  }
  return false;
}

std::vector<CanonicalPiece> native_to_canonical(ModelKind kind, const std::string& native_name) {
  return kind == ModelKind::kDit ? dit(native_name) : vae(native_name);
}

}  // namespace h3::io
