#include <gtest/gtest.h>

#include "pdserve/core/status.h"

namespace pdserve {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return invalid_argument("not positive: " + std::to_string(v));
  return v;
}

Result<int> doubled(int v) {
  PDS_ASSIGN_OR_RETURN(int x, parse_positive(v));
  return 2 * x;
}

TEST(Status, OkAndErrorCarryCodeAndMessage) {
  EXPECT_TRUE(Status::ok().is_ok());
  Status s = invalid_argument("bad field");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "invalid_argument: bad field");
  EXPECT_EQ(s.with_context("config.json").message(), "config.json: bad field");
}

TEST(Result, AssignOrReturnPropagatesErrors) {
  auto good = doubled(4);
  ASSERT_TRUE(good.is_ok());
  EXPECT_EQ(*good, 8);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

}  // namespace
}  // namespace pdserve
