// The marking as an XMP packet (docs/element.md, "Marking"): IPTC's digital source type and AI
// fields (IPTC Photo Metadata 2025.1 / Video Metadata Hub 1.7: AISystemUsed,
// AISystemVersionUsed, AIPromptInformation), Dublin Core's title and description, xmp's
// CreatorTool, and the whole record (JSON) under gst-h3's own namespace; and the ISO BMFF box
// that carries it in an MP4 (a top-level `uuid` box of XMP's UUID, which exiftool, Adobe's tools
// and GStreamer's qtdemux read). Torch-free.
#pragma once

#include <string>
#include <vector>

#include "marking/record.h"

namespace h3::marking {

// gst-h3's XMP namespace (its fields: Record, Model, ModelSHA256, Seed, Sampler).
inline constexpr const char* kXmpNamespace = "urn:gst-h3:marking:1";

std::string to_xmp(const Record& r);
// The record of a packet to_xmp() wrote. Throws h3::Error(kFormat) naming `origin` when the
// packet is not XML or has no h3:Record (and record_from_json's errors).
Record record_from_xmp(const std::string& packet, const std::string& origin);
// Whether `packet` holds an h3:Record (one of gst-h3's packets, not a muxer's own).
bool has_record(const std::string& packet);

// The top-level `uuid` box (UUID BE7ACFCB-97A9-42E8-9C71-999491E3AFAC) holding `packet`.
std::string xmp_uuid_box(const std::string& packet);
// The XMP packets of the top-level XMP `uuid` boxes of the MP4/QuickTime file `path`, in file
// order. Throws h3::Error(kNotFound) naming the file when it cannot be read, kFormat when its
// boxes do not add up (not an MP4, or cut short).
std::vector<std::string> mp4_xmp_packets(const std::string& path);

}  // namespace h3::marking
