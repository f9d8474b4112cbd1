// The checks of a start's settings that come before the engine is opened: what the engine would
// misread, or what is plainly missing. What only the engine can judge (a layout, a model's
// limits) it refuses itself when it opens.
#pragma once

#include <gst/gst.h>

#include "settings.h"

namespace h3gst {

// False, with an element error posted that names the property and says what to set.
bool check_settings(GstElement* element, const Settings& s);

}  // namespace h3gst
