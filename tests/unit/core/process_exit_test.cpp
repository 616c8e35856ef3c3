#include "escpod/core/process_exit.hpp"

#include <gtest/gtest.h>

#include <memory>

namespace escpod {
namespace {

struct Counted {
  explicit Counted(int* destroyed) : m_destroyed(destroyed) {}
  ~Counted() { ++*m_destroyed; }
  int* m_destroyed;
};

// Library callers (the Python module, tests) never declare the process ending: objects handed
// over stay with their owner and are destroyed as usual.
TEST(ProcessExit, ObjectsStayWithTheirOwnerByDefault) {
  ASSERT_FALSE(process_ends_after_command());
  int destroyed = 0;
  {
    auto object = std::make_unique<Counted>(&destroyed);
    leave_to_process_exit(object);
    ASSERT_NE(object, nullptr);
    EXPECT_EQ(destroyed, 0);
  }
  EXPECT_EQ(destroyed, 1);
}

#if !defined(__SANITIZE_ADDRESS__)  // the object is leaked on purpose: LeakSanitizer would say so
TEST(ProcessExit, ObjectsAreLeftUndestroyedWhenTheProcessEndsAfterTheCommand) {
  set_process_ends_after_command(true);
  int destroyed = 0;
  {
    auto object = std::make_unique<Counted>(&destroyed);
    leave_to_process_exit(object);
    EXPECT_EQ(object, nullptr);  // moved out: the caller's variable holds nothing to destroy
  }
  set_process_ends_after_command(false);
  EXPECT_EQ(destroyed, 0);
}
#endif

}  // namespace
}  // namespace escpod
