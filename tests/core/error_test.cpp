#include "h3/error.h"

#include <gtest/gtest.h>

TEST(Error, CarriesKindAndMessage) {
  try {
    throw h3::Error(h3::ErrorKind::kNotFound, "model.safetensors: no such file");
  } catch (const h3::Error& e) {
    EXPECT_EQ(e.kind(), h3::ErrorKind::kNotFound);
    EXPECT_STREQ(e.what(), "model.safetensors: no such file");
    EXPECT_STREQ(h3::to_string(e.kind()), "not found");
  }
}
