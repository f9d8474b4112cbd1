// The `h3` plugin: registers h3videosrc, h3src and h3mark. Deliberately cheap: no LibTorch, CUDA
// or model is touched here; the engine module is opened when the element starts.
#include <gst/gst.h>

#include "gsth3mark.h"
#include "gsth3src.h"
#include "gsth3videosrc.h"

static gboolean plugin_init(GstPlugin* plugin) {
  return GST_ELEMENT_REGISTER(h3videosrc, plugin) && GST_ELEMENT_REGISTER(h3src, plugin) &&
         GST_ELEMENT_REGISTER(h3mark, plugin);
}

GST_PLUGIN_DEFINE(GST_VERSION_MAJOR, GST_VERSION_MINOR, h3, "MiniMax-H3 video generation", plugin_init,
                  VERSION, GST_LICENSE, GST_PACKAGE_NAME, GST_PACKAGE_ORIGIN)
