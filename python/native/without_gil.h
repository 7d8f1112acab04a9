// WithoutGil: runs work with the GIL released and takes the GIL back by a plain call,
// never from a destructor, so that a thread Python ends while it finalizes exits cleanly.
#ifndef SHARDCAST_PYTHON_NATIVE_WITHOUT_GIL_H_
#define SHARDCAST_PYTHON_NATIVE_WITHOUT_GIL_H_

#include <Python.h>
#include <cxxabi.h>

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

namespace shardcast::client {

// Runs `work()` without the GIL and returns what it returns (or rethrows what it threw),
// holding the GIL again. Why not pybind11::gil_scoped_release: a thread that takes the
// GIL back while the interpreter finalizes (a daemon thread still in close() when the
// main thread exits) is ended by CPython with pthread_exit, whose forced unwinding
// aborts the process ("terminate called without an active exception") when it leaves a
// noexcept function, and gil_scoped_release takes the GIL back in its destructor. Here
// the unwinding passes through ordinary frames up to the thread's start, which ends the
// thread as Python meant. REQUIRES: the GIL is held; `work` does not touch Python
// objects (it may take the GIL itself, as SignalCheck does).
template <typename Work>
auto WithoutGil(Work&& work) -> decltype(work()) {
  using Result = decltype(work());
  if constexpr (std::is_void_v<Result>) {
    WithoutGil([&work] {
      std::forward<Work>(work)();
      return true;
    });
  } else {
    PyThreadState* const state = PyEval_SaveThread();
    std::exception_ptr error;
    std::optional<Result> result;
    try {
      result.emplace(std::forward<Work>(work)());
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is being ended while it waits: let it go (see above)
    } catch (...) {
      error = std::current_exception();
    }
    PyEval_RestoreThread(state);
    if (error) std::rethrow_exception(error);
    return *std::move(result);
  }
}

}  // namespace shardcast::client

#endif  // SHARDCAST_PYTHON_NATIVE_WITHOUT_GIL_H_
