#pragma once
// A rank's connection to the rendezvous store, usable as Gloo's rendezvous store (set / get /
// wait with a timeout) so that Gloo's connectFullMesh rendezvous runs through it.
#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace flow::distributed {

// A store call failed (timeout, rank 0 gone, rendezvous aborted). The message names the keys;
// callers prefix it with their op and rank.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The store at the address serves another job: it has another rendezvous id (two jobs were
// started on one MASTER_PORT). Retrying cannot help.
class RdzvIdMismatch : public StoreError {
 public:
  using StoreError::StoreError;
};

// Every store call carries its job's rendezvous id in this gRPC metadata; the server answers only
// calls with its own. ("-bin": the id may be any bytes.)
inline constexpr const char* kRdzvIdMetadata = "flow-rdzv-id-bin";
// "rendezvous id 'ID'", or "no rendezvous id" for the empty one, for messages.
std::string describe_rdzv_id(const std::string& rdzv_id);

class StoreClient : public gloo::rendezvous::Store {
 public:
  // Connects to host:port, retrying for up to connect_timeout; StoreError when rank 0 cannot be
  // reached. timeout bounds every later call. Every call carries rdzv_id; RdzvIdMismatch when the
  // store serves another.
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout,
              std::chrono::milliseconds connect_timeout, std::string rdzv_id);
  ~StoreClient() override;

  void set(const std::string& key, const std::vector<char>& value) override;
  // Waits up to the client's timeout for the key.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // timeout defaults to the client's.
  void set_string(const std::string& key, const std::string& value, std::optional<std::chrono::milliseconds> timeout = {});
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout);
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::vector<std::string>& keys);
  // Makes every rank's waiting store calls fail with message (best effort: never throws).
  void abort(const std::string& message) noexcept;

  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::chrono::milliseconds timeout_;
  std::string rdzv_id_;
  struct Connection;  // the gRPC channel and stub, kept out of this header
  std::unique_ptr<Connection> connection_;
};

}  // namespace flow::distributed
