// h3-live-webrtc: an endless h3src stream, encoded once, to up to --max-viewers browsers over
// WebRTC (and to any number over HLS with --hls), each viewer able to change the prompt
// (docs/causal.md, "Watched and steered over WebRTC"). pipelines/live-webrtc.sh runs it.
#include <glib-unix.h>
#include <gst/gst.h>

#include <cstdio>
#include <string>

#include "live_server.h"

namespace {

bool positive(const char* name, int value, std::string* error) {
  if (value > 0) return true;
  *error = std::string("--") + name + " must be at least 1, not " + std::to_string(value);
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  gst_init(&argc, &argv);
  h3live::ServerOptions o;
  gchar* listen = nullptr;
  gchar* page_dir = nullptr;
  gchar* hls = nullptr;
  gchar* stun = nullptr;
  gchar* properties = nullptr;
  int sdp_bytes = static_cast<int>(o.limits.max_sdp_bytes);
  int prompt_bytes = static_cast<int>(o.limits.max_prompt_bytes);
  GOptionEntry entries[] = {
      {"port", 0, 0, G_OPTION_ARG_INT, &o.port, "TCP port of the page and the signalling (8080)", "PORT"},
      {"listen", 0, 0, G_OPTION_ARG_STRING, &listen,
       "Address to listen on (127.0.0.1); any other needs the steering token to change the prompt",
       "ADDRESS"},
      {"page-dir", 0, 0, G_OPTION_ARG_FILENAME, &page_dir,
       "Folder of webrtc.html (and index.html, the HLS page)", "DIR"},
      {"hls", 0, 0, G_OPTION_ARG_FILENAME, &hls,
       "Also write HLS of the same encoding into DIR, served at /hls/", "DIR"},
      {"stun", 0, 0, G_OPTION_ARG_STRING, &stun, "STUN server for viewers beyond a NAT (stun://host:port)",
       "URL"},
      {"properties", 0, 0, G_OPTION_ARG_STRING, &properties, "h3src properties, gst-launch syntax", "PROPS"},
      {"max-viewers", 0, 0, G_OPTION_ARG_INT, &o.limits.max_viewers, "WebRTC viewers at once (8)", "N"},
      {"max-sdp-bytes", 0, 0, G_OPTION_ARG_INT, &sdp_bytes, "Largest SDP offer taken (32768)", "N"},
      {"max-prompt-bytes", 0, 0, G_OPTION_ARG_INT, &prompt_bytes, "Longest prompt taken, UTF-8 bytes (2048)",
       "N"},
      {"prompts-per-second", 0, 0, G_OPTION_ARG_INT, &o.limits.prompts_per_second,
       "Prompt changes taken per rolling second, all viewers together (2)", "N"},
      {"connect-timeout", 0, 0, G_OPTION_ARG_INT, &o.limits.connect_timeout_s,
       "Seconds from an offer to an open data channel before the viewer is dropped (20)", "S"},
      {"silence-timeout", 0, 0, G_OPTION_ARG_INT, &o.limits.silence_timeout_s,
       "Seconds without a keep-alive before a viewer is dropped (10)", "S"},
      {nullptr, 0, 0, G_OPTION_ARG_NONE, nullptr, nullptr, nullptr}};
  GOptionContext* context = g_option_context_new("- serve an endless h3src stream to browsers over WebRTC");
  g_option_context_add_main_entries(context, entries, nullptr);
  GError* err = nullptr;
  const bool parsed = g_option_context_parse(context, &argc, &argv, &err);
  g_option_context_free(context);
  if (!parsed) {
    g_printerr("h3-live-webrtc: %s (--help lists the options)\n", err->message);
    return 2;
  }
  if (listen != nullptr) o.listen = listen;
  if (page_dir != nullptr) o.page_dir = page_dir;
  if (hls != nullptr) o.hls_dir = hls;
  if (stun != nullptr) o.stun = stun;
  if (properties != nullptr) o.h3src_properties = properties;
  g_free(listen), g_free(page_dir), g_free(hls), g_free(stun), g_free(properties);
  std::string error;
  if (o.page_dir.empty()) error = "--page-dir is needed (pipelines/live in the source tree)";
  if (error.empty() && (o.port < 1 || o.port > 65535))
    error = "--port must be 1-65535, not " + std::to_string(o.port);
  for (auto [name, value] : {std::pair{"max-viewers", o.limits.max_viewers},
                             {"max-sdp-bytes", sdp_bytes},
                             {"max-prompt-bytes", prompt_bytes},
                             {"prompts-per-second", o.limits.prompts_per_second},
                             {"connect-timeout", o.limits.connect_timeout_s},
                             {"silence-timeout", o.limits.silence_timeout_s}}) {
    if (error.empty()) positive(name, value, &error);
  }
  if (!error.empty()) {
    g_printerr("h3-live-webrtc: %s\n", error.c_str());
    return 2;
  }
  o.limits.max_sdp_bytes = static_cast<size_t>(sdp_bytes);
  o.limits.max_prompt_bytes = static_cast<size_t>(prompt_bytes);

  GMainLoop* loop = g_main_loop_new(nullptr, FALSE);
  int status = 0;
  {
    h3live::LiveServer server(o, [loop, &status] {
      status = 1;
      g_main_loop_quit(loop);
    });
    if (!server.start(&error)) {
      g_printerr("h3-live-webrtc: %s\n", error.c_str());
      status = 1;
    } else {
      g_print("h3-live-webrtc: %s\n", server.page_url().c_str());
      for (int sig : {SIGINT, SIGTERM}) {
        g_unix_signal_add(
            sig,
            [](gpointer loop) -> gboolean {
              g_main_loop_quit(static_cast<GMainLoop*>(loop));
              return G_SOURCE_REMOVE;
            },
            loop);
      }
      g_main_loop_run(loop);
    }
  }
  g_main_loop_unref(loop);
  return status;
}
