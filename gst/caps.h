// The caps of both elements: the pad templates (one video format list for h3videosrc's pad and
// h3src's video pad, the audio formats of h3src's audio pad), their restriction to the plan once
// the engine has planned the request, their fixation and the check of what was negotiated.
// Pure functions of the plan: they know nothing of the element's state.
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "h3/request.h"

// The formats FrameWriter writes: RGB (the engine's own, preferred) and the conversions.
#define H3_VIDEO_CAPS GST_VIDEO_CAPS_MAKE("{ RGB, RGBA, BGRx, I420 }")
// Stereo at the model's rate (its audio VAE's config), fixed from the plan when the stream starts;
// F32LE the engine's own samples, S16LE AudioWriter's conversion.
#define H3_AUDIO_CAPS                                                                              \
  "audio/x-raw, format = (string) { F32LE, S16LE }, rate = (int) [ 1, MAX ], channels = (int) 2, " \
  "layout = (string) interleaved, channel-mask = (bitmask) 0x3"

namespace h3gst {

// `caps` (taken) restricted to the planned size and rate, square pixels.
GstCaps* planned_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d);
// Fixates the first structure of `caps` (writable, truncated) around the plan: size, rate,
// square pixels, progressive, RGB preferred, sRGB (RGB) or BT.709 (I420) colorimetry.
void fixate_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d);
// Whether negotiated video `info` is exactly the plan: its size and rate, square pixels,
// progressive.
bool caps_match_plan(const GstVideoInfo& info, const h3::ClipPlan& plan, gint fps_n, gint fps_d);

// `caps` (taken) restricted to the plan's audio rate (the model's audio VAE's).
GstCaps* planned_audio_caps(GstCaps* caps, const h3::ClipPlan& plan);
// Fixates the first structure of `caps` (writable, truncated) preferring the engine's own F32LE
// over a conversion to S16LE.
void fixate_audio_caps(GstCaps* caps);

// A CAPS query's answer: `caps` (taken) intersected with the query's `filter` (may be null),
// in the filter's order.
GstCaps* filter_caps(GstCaps* caps, GstCaps* filter);

}  // namespace h3gst
