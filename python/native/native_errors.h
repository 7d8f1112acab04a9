// shardcast._native's errors: which shardcast.errors class a failed call raises, and the
// check that a wait without the GIL runs to let Ctrl-C (and the stream's notices) through.
#ifndef SHARDCAST_PYTHON_NATIVE_NATIVE_ERRORS_H_
#define SHARDCAST_PYTHON_NATIVE_NATIVE_ERRORS_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "client/stream/rank_stream.h"

namespace shardcast::client {

// Which call an error came from decides what kind of Python error it is: a status the
// server sent while registering is a refusal of the job, the same code from
// start_epoch's own checks is a bad argument.
enum class Call { kRegister, kStartEpoch, kNext };

// The kinds of error the native client reports, bound as _native.ErrorKind: each is one
// shardcast.errors class (errors.from_native), so neither side spells a kind as a string.
enum class ErrorKind {
  kValue,        // a bad argument: ValueError
  kUnavailable,  // ServerUnavailableError
  kTimeout,      // StreamTimeoutError
  kRefused,      // JobRefusedError
  kChanged,      // JobChangedError
  kCheck,        // BatchCheckError
  kClosed,       // LoaderClosedError
  kFork,         // ForkedProcessError
  kError,        // ShardcastError
};

// Raises the shardcast.errors class of `kind` with `message` and the status code `code`
// (0: no status behind it).
[[noreturn]] void RaiseKind(ErrorKind kind, const std::string& message, int code = 0);

// Raises `status` as the shardcast.errors class of its kind, with its message and code.
[[noreturn]] void Raise(const absl::Status& status, Call call);

// RankStream's InterruptCheck for a wait without the GIL: takes the GIL back and runs
// Python's signal handlers (PyErr_CheckSignals: only on the main thread, where Ctrl-C's
// KeyboardInterrupt is raised). Once a handler raised, the wait ends; the caller, holding
// the GIL again, throws the Python error that is set (Rethrow).
//
// It also relays the stream's notices (StreamSettings::on_waiting, told on the
// registering thread, which must not take the GIL while the waiting one may hold it) to
// the "shardcast" logger, from the waiting thread, at its next check.
class SignalCheck {
 public:
  // Notices a stream's registering thread left for the waiting thread to log. Shared: the
  // stream keeps its sink for registrations after the first (a server that restarted).
  struct Notices {
    absl::Mutex mu;
    std::vector<std::string> waiting ABSL_GUARDED_BY(mu);
  };
  static std::function<void(const std::string&)> SinkFor(std::shared_ptr<Notices> notices);

  // REQUIRES: `notices` outlives this check.
  explicit SignalCheck(Notices* notices) : notices_(notices) {}

  InterruptCheck Function();
  // Holding the GIL, after the wait: the notices not logged yet, then the handler's
  // exception, if one was raised.
  void RethrowIfRaised();

 private:
  // Holding the GIL.
  void LogNotices();

  Notices* const notices_;
  bool raised_ = false;
};

// Adds _native.ErrorKind to `m`.
void BindErrorKinds(pybind11::module_& m);

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_NATIVE_ERRORS_H_
