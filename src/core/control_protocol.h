// The control protocol between peers: the one definition of its message
// ids and of how each message is encoded, for every front door.
//
// Requests travel over bootstrap::ControlServer/ControlClient as
// (from, type, payload) and are answered with a reply or an error.  The
// process's one control server has a listener per front door; a request is
// served by the door whose listener accepted its connection, and `from` is
// what that door told its peer to send.  Every
// decoder treats its input as untrusted: it returns nullopt on a short,
// malformed or oversized payload (limits below), or one with bytes left
// over, and never reads past it.
//
//   type         payload                                  reply
//   kFetchTable  -                                        RegionTable::Serialize(); subscribes the
//                                                         caller to kInvalidate for that table
//   kInvalidate  Invalidation                             "" (sent to every subscriber, awaited)
//   kNotify      opaque bytes (the front door's)          "" or kQueueFull
//   kHello       Hello (an engine client introduces itself) HelloReply
//   kBye         -                                        "" (the client disconnects)
//   kGone        -                                        "" (the server finalized)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hixl::core {

// Limits on what a peer may send (decoders refuse more).
inline constexpr uint32_t kMaxNameBytes = 1024;              // a host, an engine's name, a transport's kind
inline constexpr uint32_t kMaxAddressBytes = 64u << 10;      // one transport's address blob
inline constexpr uint32_t kMaxAddresses = 64;                // transport addresses in one message
inline constexpr uint32_t kMaxNamedNotifyBytes = 64u << 10;  // an engine notification's name + msg

enum class ControlMsg : uint8_t {
  kFetchTable = 1,
  kInvalidate = 2,
  kNotify = 3,
  kHello = 10,
  kBye = 11,
  kGone = 12,
};

inline constexpr uint8_t Wire(ControlMsg m) { return static_cast<uint8_t>(m); }

// The owner removed the regions overlapping [base, base+len); its table is
// at `generation` afterwards.
struct Invalidation {
  uint64_t generation = 0;
  uint64_t base = 0;
  uint64_t len = 0;
};
std::string Encode(const Invalidation& m);
std::optional<Invalidation> DecodeInvalidation(std::string_view payload);

// What a process publishes so that a peer can pick a transport to it and
// connect: each transport's kind (its name, which ties the address to the
// same kind of transport on the peer) and its address blob.
struct PublishedAddress {
  std::string kind;
  std::string address;
};
using PublishedAddresses = std::vector<PublishedAddress>;

// A world rank's record in the store: where its control endpoint listens,
// and its transports' addresses.
struct PeerRecord {
  std::string host;
  uint16_t port = 0;
  PublishedAddresses addresses;
};
std::string Encode(const PeerRecord& m);
std::optional<PeerRecord> DecodePeerRecord(std::string_view bytes);

// An engine's notification: [name][msg], together at most kMaxNamedNotifyBytes.
struct NamedNotify {
  std::string name;
  std::string msg;
};
std::string Encode(const NamedNotify& m);
std::optional<NamedNotify> DecodeNamedNotify(std::string_view payload);

// An engine (the client) introduces itself to the engine it connects to:
// who it is and where its own control endpoint answers calls back.
struct Hello {
  uint64_t uuid = 0;  // tells a connection to oneself apart
  std::string name;   // the client's engine address, as it was initialized
  std::string callback_host;
  uint16_t callback_port = 0;
  int64_t id_for_server = -1;  // the client's id for the server (the `from` of calls back; random)
};
std::string Encode(const Hello& m);
std::optional<Hello> DecodeHello(std::string_view payload);

struct HelloReply {
  uint64_t uuid = 0;
  int64_t id_for_client = -1;  // the server's id for the client (the `from` of its requests; random)
  PublishedAddresses addresses;
};
std::string Encode(const HelloReply& m);
std::optional<HelloReply> DecodeHelloReply(std::string_view bytes);

}  // namespace hixl::core
