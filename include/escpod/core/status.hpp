// Errors as values: Status (a code and a message, cheap when OK) and Result<T> (a value or a
// Status). Library code returns these for every expected failure (bad file, unknown version,
// missing model); only cli/ turns them into exit codes. See docs/architecture.md §3.1.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace escpod {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // an unusable value in input data or an API call (bad id text, bad CSV cell)
  kUsage,            // an unusable option or argument in itself or in combination (a bad flag
                     // value, a missing required option); the CLI exits 2 for this code only
  kNotFound,         // a file, read id or field that does not exist
  kAlreadyExists,    // an output that would be overwritten without --force
  kIoError,          // the operating system refused (open, read, write, rename, disk full)
  kCorrupt,          // input bytes that do not follow the format (truncated, bad footer, bad VBZ)
  kUnsupported,      // valid input that this build cannot handle (unknown version, operator)
  kCancelled,        // stopped on request (signal, closed queue)
  kInternal,         // a broken invariant in our own code
};

// Human-readable name of a code, e.g. "corrupt".
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : m_code(code), m_message(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status usage(std::string m) { return {StatusCode::kUsage, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status already_exists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return m_code == StatusCode::kOk; }
  StatusCode code() const { return m_code; }
  const std::string& message() const { return m_message; }

  // "corrupt: <message>"; "ok" when OK.
  std::string to_string() const;

  // Returns a copy whose message is "<context>: <message>", for adding the file or read that a
  // lower layer did not know about. OK stays OK.
  Status with_context(std::string_view context) const;

 private:
  StatusCode m_code = StatusCode::kOk;
  std::string m_message;
};

// A value of type T or an error Status. Accessing value() of an error is a bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_state(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : m_state(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(m_state).is_ok() && "Result constructed from an OK Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(m_state); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(m_state);
  }
  T& value() & { assert(is_ok()); return std::get<T>(m_state); }
  const T& value() const& { assert(is_ok()); return std::get<T>(m_state); }
  T&& value() && { assert(is_ok()); return std::get<T>(std::move(m_state)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<Status, T> m_state;
};

namespace detail {
inline const Status& status_of(const Status& s) { return s; }
template <typename T>
const Status& status_of(const Result<T>& r) { return r.status(); }
}  // namespace detail

}  // namespace escpod

#define ESCPOD_CONCAT_INNER(a, b) a##b
#define ESCPOD_CONCAT(a, b) ESCPOD_CONCAT_INNER(a, b)

// Returns the Status of `expr` (a Status or Result) from the enclosing function if it failed.
// The Status is copied out within the full expression: `f().status()` would otherwise leave a
// reference into a destroyed temporary. (Copying an OK Status is cheap: no message.)
#define ESCPOD_RETURN_IF_ERROR(expr)                                          \
  do {                                                                        \
    ::escpod::Status escpod_status_ = ::escpod::detail::status_of(expr);      \
    if (!escpod_status_.is_ok()) return escpod_status_;                       \
  } while (false)

// `lhs = value of expr`, or return its Status from the enclosing function.
#define ESCPOD_ASSIGN_OR_RETURN(lhs, expr) \
  ESCPOD_ASSIGN_OR_RETURN_IMPL(ESCPOD_CONCAT(escpod_result_, __LINE__), lhs, expr)
#define ESCPOD_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
