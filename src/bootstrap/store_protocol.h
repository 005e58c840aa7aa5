// The store's wire protocol: its limits, the request types, and the encoding
// and decoding of requests and replies.  Shared by TcpStoreClient
// (store_client.cc) and TcpStoreServer (store_server.cc); internal to them.
//
// Every message is a frame: 4-byte little-endian length, then the payload;
// integers inside are little-endian, strings are a u32 length followed by the
// bytes, as net::Writer / net::Reader lay them out:
//
//   request  = u8 op, fields
//     HELLO          i32 rank                  (first request on a connection)
//     SET            key, value
//     GET            key, i64 timeout_ms       (parked until key exists)
//     ADD            key, i64 delta
//     WAIT_AT_LEAST  key, i64 target, i64 timeout_ms   (parked until >= target)
//     DELETE         key
//     BYE                                      (clean leave; no more requests)
//     GATHER         prefix, i64 count, i64 timeout_ms
//                    (parked until keys prefix+"0" .. prefix+"<count-1>" all exist)
//   reply    = i32 code (0 = ok, else an hixl error code), message, fields
//     GET -> value; ADD -> i64 new value; GATHER -> u32 count, then count
//     values (in key order); the others -> nothing.
//
// A client sends one request at a time and waits for its reply, so replies
// need no ids.  The server parks blocking requests and answers them when they
// are satisfied, when their timeout passes, or when a rank fails (its
// connection closes without BYE).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "bootstrap/store.h"

namespace hixl::bootstrap::detail {

// Longer timeouts are cut to this (a year), which keeps deadline arithmetic
// far from overflow.
constexpr int64_t kMaxTimeoutMs = int64_t{365} * 24 * 3600 * 1000;
// How much longer than its own timeout a client waits for the server's reply
// (the server answers a timed-out wait itself; this only catches a server
// that stopped answering without closing the connection).
constexpr int64_t kSlackMs = 3000;
// The bound on requests that do not wait (SET, ADD, DELETE, HELLO, BYE).
constexpr int64_t kIoTimeoutMs = 30000;
// Limits on what a peer may send.  A key is at most kMaxKey bytes, a value
// at most kMaxValue (hixl_allgather's 64 MiB per rank), a reply's message at
// most kMaxMessage.  Frames are checked against the largest their type can
// be (MaxRequestFrame, kMaxReplyFrame) before their body is read; a longer
// frame ends the connection.
constexpr uint32_t kMaxKey = 4096;
constexpr uint32_t kMaxValue = 64u << 20;
constexpr uint32_t kMaxMessage = 64u << 10;
constexpr uint32_t kMaxReplyFrame = 4 + 4 + kMaxMessage + 4 + kMaxValue;
// The largest request of any type.
constexpr uint32_t kMaxFrame = 1 + 4 + kMaxKey + 4 + kMaxValue;

enum class Op : uint8_t {
  kHello = 1,
  kSet = 2,
  kGet = 3,
  kAdd = 4,
  kWaitAtLeast = 5,
  kDelete = 6,
  kBye = 7,
  kGather = 8,
};
// The most keys one GATHER may ask for, and the most its reply may carry (the
// values and their lengths, a reply's value field).
constexpr int64_t kMaxGather = 1 << 20;
static_assert(kMaxGatherBytes == kMaxValue, "a GATHER reply's fields are one value field");

// "SET", "WAIT_AT_LEAST", ...; "UNKNOWN" for a type not listed above.
const char* OpName(Op op);
// Whether requests of this type carry a key (all but HELLO and BYE).
bool HasKey(Op op);

// The largest request frame of type op (a type not listed: as large as any
// request without a value).
uint32_t MaxRequestFrame(Op op);

// One request.  Only the fields of its type are encoded or decoded.
struct Request {
  Op op = Op::kHello;      // as received: may be a type not listed above
  std::string key;         // SET, GET, ADD, WAIT_AT_LEAST, DELETE
  int32_t rank = 0;        // HELLO
  std::string value;       // SET
  int64_t delta = 0;       // ADD
  int64_t target = 0;      // WAIT_AT_LEAST; GATHER: the number of keys
  int64_t timeout_ms = 0;  // GET, WAIT_AT_LEAST, GATHER: how long the server waits
};

// The request's payload (without the frame's length).
std::string EncodeRequest(const Request& q);

enum class Decoded {
  kOk,         // *q is filled (an unknown type has only q->op)
  kEmpty,      // no type byte
  kBadKey,     // q->op is set, its key is missing, cut or longer than kMaxKey
  kBadFields,  // q->op and q->key are set, the fields are wrong (or a value is longer than kMaxValue)
};
Decoded DecodeRequest(std::string_view payload, Request* q);

// A reply: st's code and message, then fields (EncodeValue/EncodeInt, or
// nothing).  The payload, without the frame's length.
std::string EncodeReply(const Status& st, std::string_view fields);

struct Reply {
  Status status;       // the server's answer
  std::string fields;  // what followed the message
};
// nullopt when the payload is malformed (or its message is longer than kMaxMessage).
std::optional<Reply> DecodeReply(std::string_view payload);

// The fields of a GET reply (a value) and of an ADD reply (an integer).
// Decoding fails on missing or extra bytes.
std::string EncodeValue(std::string_view value);
bool DecodeValue(std::string_view fields, std::string* value);
std::string EncodeInt(int64_t v);
bool DecodeInt(std::string_view fields, int64_t* v);
// The fields of a GATHER reply.  Encoding fails (nullopt) when they would be
// longer than kMaxGatherBytes; decoding fails unless exactly `count` values
// of at most kMaxValue bytes fill the fields.
std::optional<std::string> EncodeValues(const std::vector<const std::string*>& values);
bool DecodeValues(std::string_view fields, int64_t count, std::vector<std::string>* values);
// The key GATHER's i-th value is stored at.
std::string GatherKey(std::string_view prefix, int64_t i);

}  // namespace hixl::bootstrap::detail
