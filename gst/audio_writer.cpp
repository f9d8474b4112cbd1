#include "audio_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace h3gst {

bool AudioWriter::configure(const GstAudioInfo& info, int64_t rate) {
  const GstAudioFormat format = GST_AUDIO_INFO_FORMAT(&info);
  if (GST_AUDIO_INFO_RATE(&info) != rate || GST_AUDIO_INFO_CHANNELS(&info) != kChannels ||
      (format != GST_AUDIO_FORMAT_F32LE && format != GST_AUDIO_FORMAT_S16LE)) {
    return false;
  }
  s16_ = format == GST_AUDIO_FORMAT_S16LE;
  bytes_per_frame_ = static_cast<gsize>(GST_AUDIO_INFO_BPF(&info));
  return true;
}

bool AudioWriter::write(const AudioSlice& a, GstBuffer* buf, GstElement* element) const {
  const int64_t values = a.count * kChannels;
  const gsize size = bytes(a.count);
  GstMapInfo map;
  if (gst_buffer_get_size(buf) < size || !gst_buffer_map(buf, &map, GST_MAP_WRITE)) {
    GST_ELEMENT_ERROR(element, RESOURCE, FAILED,
                      ("Could not map an audio buffer of %" G_GSIZE_FORMAT " bytes", size), (nullptr));
    return false;
  }
  if (s16_) {
    auto* out = reinterpret_cast<int16_t*>(map.data);
    for (int64_t i = 0; i < values; ++i) {
      out[i] = static_cast<int16_t>(std::lrintf(std::clamp(a.data[i], -1.0f, 1.0f) * 32767.0f));
    }
  } else {
    std::memcpy(map.data, a.data, size);
  }
  gst_buffer_unmap(buf, &map);
  gst_buffer_set_size(buf, static_cast<gssize>(size));
  return true;
}

}  // namespace h3gst
