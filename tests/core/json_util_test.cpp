#include <gtest/gtest.h>

#include "pdserve/core/json_util.h"

namespace pdserve {
namespace {

TEST(JsonFields, ErrorsNameTheField) {
  Json j = Json::parse(R"({"a": 3, "b": "x", "c": 2.5, "l": [1, "two"]})");
  JsonFields f(j, "config.json");
  EXPECT_EQ(*f.get_int("a"), 3);
  auto b = f.get_int("b");
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().message(), "config.json: field 'b' must be an integer, got \"x\"");
  EXPECT_FALSE(f.get_int("c").is_ok());
  EXPECT_EQ(*f.get_int("missing", 7), 7);
  auto m = f.get_int("missing");
  EXPECT_NE(m.status().message().find("'missing' is missing"), std::string::npos);
  EXPECT_FALSE(f.get_int_list("l").is_ok());
}

TEST(JsonFields, ParseJsonRejectsGarbage) {
  EXPECT_FALSE(parse_json("{not json", "body").is_ok());
  EXPECT_TRUE(parse_json("{}", "body").is_ok());
}

}  // namespace
}  // namespace pdserve
