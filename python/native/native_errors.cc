// shardcast._native's errors (see native_errors.h).
#include "python/native/native_errors.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/checks/stream_checks.h"

namespace py = pybind11;

namespace shardcast::client {
namespace {

// The kind of a failed call's status.
ErrorKind KindOf(const absl::Status& status, Call call) {
  if (IsClosed(status)) return ErrorKind::kClosed;
  if (call == Call::kStartEpoch) return ErrorKind::kValue;
  if (call == Call::kNext && IsJobChanged(status)) return ErrorKind::kChanged;
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
      return ErrorKind::kUnavailable;
    case absl::StatusCode::kDeadlineExceeded:
      // RankStream's stall rule; a register attempt's deadline ends as UNAVAILABLE.
      return ErrorKind::kTimeout;
    case absl::StatusCode::kDataLoss:
      return ErrorKind::kCheck;
    case absl::StatusCode::kInternal:
      return ErrorKind::kError;
    default:
      return ErrorKind::kRefused;
  }
}

}  // namespace

void RaiseKind(ErrorKind kind, const std::string& message, int code) {
  py::object error =
      py::module_::import("shardcast.errors").attr("from_native")(kind, message, code);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

void Raise(const absl::Status& status, Call call) {
  RaiseKind(KindOf(status, call), std::string(status.message()), static_cast<int>(status.code()));
}

std::function<void(const std::string&)> SignalCheck::SinkFor(std::shared_ptr<Notices> notices) {
  return [notices = std::move(notices)](const std::string& notice) {
    absl::MutexLock lock(&notices->mu);
    notices->waiting.push_back(notice);
  };
}

InterruptCheck SignalCheck::Function() {
  return [this] {
    if (!raised_) {
      py::gil_scoped_acquire gil;
      LogNotices();
      raised_ = PyErr_CheckSignals() != 0;
    }
    return raised_;
  };
}

void SignalCheck::RethrowIfRaised() {
  LogNotices();
  if (raised_) throw py::error_already_set();
}

void SignalCheck::LogNotices() {
  std::vector<std::string> notices;
  {
    absl::MutexLock lock(&notices_->mu);
    notices.swap(notices_->waiting);
  }
  if (notices.empty()) return;
  py::object logger = py::module_::import("logging").attr("getLogger")("shardcast");
  for (const std::string& notice : notices) {
    logger.attr("warning")(absl::StrCat("shardcast: ", notice));
  }
}

void BindErrorKinds(py::module_& m) {
  py::enum_<ErrorKind>(m, "ErrorKind", "the kinds of error (one shardcast.errors class each)")
      .value("VALUE", ErrorKind::kValue)
      .value("UNAVAILABLE", ErrorKind::kUnavailable)
      .value("TIMEOUT", ErrorKind::kTimeout)
      .value("REFUSED", ErrorKind::kRefused)
      .value("CHANGED", ErrorKind::kChanged)
      .value("CHECK", ErrorKind::kCheck)
      .value("CLOSED", ErrorKind::kClosed)
      .value("FORK", ErrorKind::kFork)
      .value("ERROR", ErrorKind::kError);
}

}  // namespace shardcast::client
