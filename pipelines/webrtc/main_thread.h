// Everything the live server holds (viewers, the limits, the HTTP messages waiting for an
// answer) is touched on the main loop's thread only; GStreamer's streaming and webrtcbin threads
// hand their news over with run_on_main.
#pragma once

#include <functional>

namespace h3live {

// Runs `work` on the default main context: at once when called there, else at its next turn.
void run_on_main(std::function<void()> work);

}  // namespace h3live
