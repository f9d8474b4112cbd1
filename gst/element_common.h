// What h3videosrc and h3src share beyond their properties (settings.h) and bus
// messages (messages.h): the checks of a start's settings, where the engine module is looked
// for, the stream's tags, the planned video caps, their fixation and check, the video buffer pool.
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include <string>

#include "engine/request.h"
#include "lifecycle.h"
#include "settings.h"

namespace h3gst {

// Registers the custom seed tag (GST_H3_TAG_SEED, gsth3videosrc.h); class_init of each element.
void register_tags();

// Refuses what the engine would misread or what is plainly missing, posting an element error
// that names the property; false then.
bool check_settings(GstElement* element, const Settings& s);
// The folder of the plugin file `element` came from ("" when unknown).
std::string plugin_dir_of(GstElement* element);
// Global tags for a stream of `s`'s clip: title and comment (the prompt), encoder, seed.
GstTagList* stream_tags(const Settings& s);

// `caps` (taken) restricted to the planned size and rate, square pixels.
GstCaps* planned_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d);
// Fixates the first structure of `caps` (writable, truncated) around the plan: size, rate,
// square pixels, progressive, RGB preferred, sRGB (RGB) or BT.709 (I420) colorimetry.
void fixate_video_caps(GstCaps* caps, const h3::ClipPlan& plan, gint fps_n, gint fps_d);

// SrcPad::negotiate's fixations: video around the plan of `published` (a const Published*), and
// audio preferring the engine's own F32LE over a conversion to S16LE.
void fixate_to_published(GstCaps* caps, const void* published);
void fixate_audio_f32(GstCaps* caps, const void*);
// `caps` (taken) restricted to the plan's audio rate (the model's audio VAE's).
GstCaps* planned_audio_caps(GstCaps* caps, const Published& pub);
// `n` interleaved f32 samples as S16LE, clamped to [-1, 1] and rounded to nearest.
void write_s16(const float* in, int64_t n, int16_t* out);

// Whether negotiated video `info` is exactly the published plan: its size and rate, square
// pixels, progressive.
bool caps_match_plan(const GstVideoInfo& info, const Published& pub);
// decide_allocation's pool: downstream's first (raised to a frame's size) or a new video pool,
// with GstVideoMeta when downstream offers it; false with an error posted when it cannot hold
// the frames.
bool decide_video_pool(GstElement* element, GstQuery* query);

}  // namespace h3gst
