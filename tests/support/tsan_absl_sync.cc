// ThreadSanitizer annotations for Debian's uninstrumented abseil (the TSan tree only,
// -DSHARDCAST_TSAN=ON, tools/tsan.sh). Linked into every executable of that tree.
//
// Why: absl::Mutex, absl::CondVar and absl::Notification are implemented in
// libabsl_synchronization.so, which Debian builds without -fsanitize=thread. Their lock
// and unlock are atomics and futexes that TSan never sees, so without this file every
// access guarded by an absl::Mutex (the whole server, and gRPC's own gpr_mu, which is an
// absl::Mutex) would be reported as a race. Abseil built with TSan annotates these very
// functions with the same __tsan_mutex_* calls (absl/synchronization/mutex.cc); this
// file defines the functions in the executable, annotates, and forwards to the library's
// definition found with dlsym(RTLD_NEXT). The executable exports them
// (--export-dynamic-symbol, tests/CMakeLists.txt), so gRPC's calls are annotated too.
// The constructor needs nothing: its inline definition in mutex.h annotates already.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace {

#define SHARDCAST_STRINGIFY_INNER(x) #x
#define SHARDCAST_STRINGIFY(x) SHARDCAST_STRINGIFY_INNER(x)

// The library's definition of `absl::<inline namespace>::<rest>` (Itanium mangling:
// `prefix` is "_ZN" or "_ZNK" for a const member), or abort: running unannotated would
// only produce false reports.
template <typename Fn>
Fn Real(const char* prefix, const char* rest) {
  const std::string ns = SHARDCAST_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = std::string(prefix) + "4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found in the abseil library\n", name.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

using absl::Condition;
using absl::CondVar;
using absl::Duration;
using absl::Mutex;
using absl::Notification;
using absl::Time;

// The library calls functions defined here too (CondVar::WaitWithTimeout calls
// WaitWithDeadline, a Notification locks its own Mutex): only the outermost of the
// nested calls on a thread annotates, so no lock or unlock is reported twice. Every
// function below opens a Nesting first.
thread_local int nesting_depth = 0;
class Nesting {
 public:
  Nesting() { ++nesting_depth; }
  ~Nesting() { --nesting_depth; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;
};
bool Outermost() { return nesting_depth == 1; }

// Lock and unlock as TSan's own annotated mutexes report them.
void PreLock(Mutex* mu, unsigned flags = 0) {
  if (Outermost()) __tsan_mutex_pre_lock(mu, flags);
}
void PostLock(Mutex* mu, unsigned flags = 0) {
  if (Outermost()) __tsan_mutex_post_lock(mu, flags, 0);
}
void PreUnlock(Mutex* mu, unsigned flags = 0) {
  if (Outermost()) __tsan_mutex_pre_unlock(mu, flags);
}
void PostUnlock(Mutex* mu, unsigned flags = 0) {
  if (Outermost()) __tsan_mutex_post_unlock(mu, flags);
}
// A wait that releases `mu` and holds it again on return (Await, CondVar::Wait). TSan
// ignores this thread's accesses from PreUnlock to PostUnlock, which covers the
// library's evaluation of the Condition (made under the real lock) before it blocks.
template <typename Wait>
auto ReleasedDuring(Mutex* mu, Wait wait) {
  PreUnlock(mu);
  auto result = wait();
  PostUnlock(mu);
  PreLock(mu);
  PostLock(mu);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

Mutex::~Mutex() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5MutexD2Ev");
  const Nesting nesting;
  if (Outermost()) __tsan_mutex_destroy(this, __tsan_mutex_not_static);
  real(this);
}

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex4LockEv");
  const Nesting nesting;
  PreLock(this);
  real(this);
  PostLock(this);
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex6UnlockEv");
  const Nesting nesting;
  PreUnlock(this);
  real(this);
  PostUnlock(this);
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>("_ZN", "5Mutex7TryLockEv");
  const Nesting nesting;
  PreLock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  PostLock(this, __tsan_mutex_try_lock | (locked ? 0 : __tsan_mutex_try_lock_failed));
  return locked;
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex10ReaderLockEv");
  const Nesting nesting;
  PreLock(this, __tsan_mutex_read_lock);
  real(this);
  PostLock(this, __tsan_mutex_read_lock);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN", "5Mutex12ReaderUnlockEv");
  const Nesting nesting;
  PreUnlock(this, __tsan_mutex_read_lock);
  real(this);
  PostUnlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN", "5Mutex8LockWhenERKNS0_9ConditionE");
  const Nesting nesting;
  PreLock(this);
  real(this, cond);
  PostLock(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "_ZN", "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const Nesting nesting;
  PreLock(this);
  const bool met = real(this, cond, timeout);
  PostLock(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "_ZN", "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const Nesting nesting;
  PreLock(this);
  const bool met = real(this, cond, deadline);
  PostLock(this);
  return met;
}

void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN", "5Mutex5AwaitERKNS0_9ConditionE");
  const Nesting nesting;
  ReleasedDuring(this, [&] {
    real(this, cond);
    return 0;
  });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "_ZN", "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const Nesting nesting;
  return ReleasedDuring(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "_ZN", "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const Nesting nesting;
  return ReleasedDuring(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>("_ZN", "7CondVar4WaitEPNS0_5MutexE");
  const Nesting nesting;
  ReleasedDuring(mu, [&] {
    real(this, mu);
    return 0;
  });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "_ZN", "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  const Nesting nesting;
  return ReleasedDuring(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "_ZN", "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  const Nesting nesting;
  return ReleasedDuring(mu, [&] { return real(this, mu, deadline); });
}

// Notify happens before every wait that sees it.
void Notification::Notify() {
  static auto real = Real<void (*)(Notification*)>("_ZN", "12Notification6NotifyEv");
  const Nesting nesting;
  if (Outermost()) __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real =
      Real<void (*)(const Notification*)>("_ZNK", "12Notification19WaitForNotificationEv");
  const Nesting nesting;
  real(this);
  if (Outermost()) __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  static auto real = Real<bool (*)(const Notification*, Duration)>(
      "_ZNK", "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE");
  const Nesting nesting;
  const bool notified = real(this, timeout);
  if (notified && Outermost()) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
