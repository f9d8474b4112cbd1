#include "video_pool.h"

#include <gst/video/video.h>

namespace h3gst {

bool decide_video_pool(GstElement* element, GstQuery* query) {
  GstCaps* caps = nullptr;
  gst_query_parse_allocation(query, &caps, nullptr);
  GstVideoInfo info;
  if (!caps || !gst_video_info_from_caps(&info, caps)) return false;

  GstBufferPool* pool = nullptr;
  guint size = 0, min = 0, max = 0;
  const bool update = gst_query_get_n_allocation_pools(query) > 0;
  if (update) gst_query_parse_nth_allocation_pool(query, 0, &pool, &size, &min, &max);
  size = MAX(size, static_cast<guint>(GST_VIDEO_INFO_SIZE(&info)));
  if (!pool) pool = gst_video_buffer_pool_new();

  GstStructure* config = gst_buffer_pool_get_config(pool);
  gst_buffer_pool_config_set_params(config, caps, size, min, max);
  if (gst_query_find_allocation_meta(query, GST_VIDEO_META_API_TYPE, nullptr))
    gst_buffer_pool_config_add_option(config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  if (!gst_buffer_pool_set_config(pool, config)) {
    config = gst_buffer_pool_get_config(pool);
    if (!gst_buffer_pool_config_validate_params(config, caps, size, min, max)) {
      gst_structure_free(config);
      gst_object_unref(pool);
      GST_ELEMENT_ERROR(element, RESOURCE, SETTINGS,
                        ("Downstream's buffer pool cannot hold %s frames", GST_VIDEO_INFO_NAME(&info)),
                        (nullptr));
      return false;
    }
    gst_buffer_pool_set_config(pool, config);
  }
  if (update)
    gst_query_set_nth_allocation_pool(query, 0, pool, size, min, max);
  else
    gst_query_add_allocation_pool(query, pool, size, min, max);
  gst_object_unref(pool);
  return true;
}

}  // namespace h3gst
