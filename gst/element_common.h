// What h3videosrc and h3src share beyond their properties (h3videosrc_settings.h) and bus
// messages (h3videosrc_messages.h): the checks of a start's settings, where the engine module
// is looked for, the stream's tags, the planned video caps and their fixation, frame times.
#pragma once

#include <gst/gst.h>

#include <mutex>
#include <string>

#include "engine/request.h"
#include "h3videosrc_settings.h"

namespace h3src {

// Registers the custom seed tag (GST_H3_TAG_SEED, gsth3videosrc.h); class_init of each element.
void register_tags();

// Locks `props_lock` (which guards `started`) for a property change, unless the element is
// PAUSED or PLAYING or started: every property shapes the request or the engine, fixed once
// started. Then the lock returned does not own it, and a warning naming the property is posted.
std::unique_lock<std::mutex> lock_for_change(GstElement* element, GParamSpec* pspec, std::mutex& props_lock,
                                             const bool& started);

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

// The running time of frame `n` at fps_n/fps_d.
GstClockTime frame_time(int64_t n, gint fps_n, gint fps_d);

}  // namespace h3src
