#include "escpod/core/status.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace escpod {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return Status::invalid_argument("not positive: " + std::to_string(x));
  return x;
}

Result<int> doubled(int x) {
  ESCPOD_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  ESCPOD_RETURN_IF_ERROR(parse_positive(a));
  ESCPOD_RETURN_IF_ERROR(parse_positive(b));
  return Status::ok();
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::ok().is_ok());
  EXPECT_EQ(Status::ok().to_string(), "ok");
  Status s = Status::corrupt("bad footer");
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.to_string(), "corrupt: bad footer");
  EXPECT_EQ(s.with_context("x.pod5").message(), "x.pod5: bad footer");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

TEST(Result, ValueOrStatusPropagates) {
  EXPECT_EQ(doubled(4).value(), 8);
  auto r = doubled(-1);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "not positive: -1");
  EXPECT_TRUE(check_both(1, 2).is_ok());
  EXPECT_EQ(check_both(1, 0).message(), "not positive: 0");
}

Status status_of_temporary(int x) {
  // Regression: the macro once bound a reference to the Status inside a destroyed temporary.
  ESCPOD_RETURN_IF_ERROR(parse_positive(x).status());
  return Status::ok();
}

TEST(Result, ReturnIfErrorOnTemporaryStatus) {
  EXPECT_TRUE(status_of_temporary(3).is_ok());
  Status s = status_of_temporary(-7);
  EXPECT_EQ(s.message(), "not positive: -7");
}

TEST(Result, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.is_ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace escpod
