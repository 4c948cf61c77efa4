// Errors as values: Status for "did it work", Result<T> for "the value or why not".
// Request paths return these; exceptions are reserved for startup code.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace pdserve {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad input from a caller or a file
  kNotFound,
  kOutOfRange,
  kUnsupported,      // valid but not something we implement
  kResourceExhausted,
  kDataLoss,         // truncated / corrupt file or message
  kIo,
  kInternal,
  kUnavailable,
  kAborted,
  kDeadlineExceeded,
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return {}; }

  bool is_ok() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

  // Prefix the message with context ("file x: ...") keeping the code.
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status unsupported(std::string m) { return {ErrorCode::kUnsupported, std::move(m)}; }
inline Status data_loss(std::string m) { return {ErrorCode::kDataLoss, std::move(m)}; }
inline Status io_error(std::string m) { return {ErrorCode::kIo, std::move(m)}; }
inline Status internal_error(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {ErrorCode::kResourceExhausted, std::move(m)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {          // NOLINT
    assert(!std::get<Status>(v_).is_ok() && "Result from an ok Status");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace pdserve

// Early-return helpers. Keep them few and obvious.
#define PDS_CONCAT_INNER(a, b) a##b
#define PDS_CONCAT(a, b) PDS_CONCAT_INNER(a, b)

#define PDS_RETURN_IF_ERROR(expr)                    \
  do {                                               \
    ::pdserve::Status _pds_st = (expr);              \
    if (!_pds_st.is_ok()) return _pds_st;            \
  } while (0)

#define PDS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)    \
  auto tmp = (expr);                                 \
  if (!tmp.is_ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

#define PDS_ASSIGN_OR_RETURN(lhs, expr) \
  PDS_ASSIGN_OR_RETURN_IMPL(PDS_CONCAT(_pds_res_, __LINE__), lhs, expr)
