// The base of the store kinds whose objects are plain URLs under a root, read
// unsigned (http_store.cc, file_store.cc): what names an object and how it is read,
// written once for them. Internal to common/remote.
#ifndef SHARDCAST_COMMON_REMOTE_UNSIGNED_URL_STORE_H_
#define SHARDCAST_COMMON_REMOTE_UNSIGNED_URL_STORE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "common/remote/http_fetcher.h"
#include "common/remote/object_store.h"
#include "common/remote/object_store_internal.h"

namespace shardcast::remote::internal {

// A store whose objects are plain URLs under its root, read unsigned (HTTP, file://):
// what names an object and how it is read, written once for every such kind.
class UnsignedUrlStore : public ObjectStore {
 public:
  const std::string& root() const override { return root_; }

  absl::StatusOr<std::optional<std::string>> GetFile(const std::string& name,
                                                     uint64_t max_bytes) override {
    RangeRequest request;
    request.url = root_ + name;
    return internal::GetSmallFile(fetcher(), request, max_bytes);
  }

  RemoteObject Object(const std::string& name, uint64_t size,
                      const std::string& etag) const override {
    return RemoteObject{name, root_ + name, size, etag};
  }

  RangeRequest Request(const RemoteObject& object, uint64_t offset,
                       uint64_t length) const override {
    return RangeRequest{object.url, std::nullopt, offset, length, object.etag, object.size};
  }

 protected:
  explicit UnsignedUrlStore(std::string root) : root_(std::move(root)) {}

  const std::string root_;
};

}  // namespace shardcast::remote::internal

#endif  // SHARDCAST_COMMON_REMOTE_UNSIGNED_URL_STORE_H_
