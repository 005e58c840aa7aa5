// The store's wire protocol: encoding and decoding of requests and replies
// (the format is described in store_protocol.h).
#include "bootstrap/store_protocol.h"

#include <utility>

#include "base/socket.h"

namespace hixl::bootstrap::detail {
namespace {

Decoded Done(bool ok, const net::Reader& r) { return ok && r.empty() ? Decoded::kOk : Decoded::kBadFields; }

}  // namespace

const char* OpName(Op op) {
  switch (op) {
    case Op::kHello: return "HELLO";
    case Op::kSet: return "SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kWaitAtLeast: return "WAIT_AT_LEAST";
    case Op::kDelete: return "DELETE";
    case Op::kBye: return "BYE";
    case Op::kGather: return "GATHER";
  }
  return "UNKNOWN";
}

bool HasKey(Op op) {
  return op == Op::kSet || op == Op::kGet || op == Op::kAdd || op == Op::kWaitAtLeast || op == Op::kDelete ||
         op == Op::kGather;
}

uint32_t MaxRequestFrame(Op op) {
  switch (op) {
    case Op::kHello: return 1 + 4;
    case Op::kBye: return 1;
    case Op::kSet: return kMaxFrame;
    default: return 1 + 4 + kMaxKey + 8 + 8;
  }
}

std::string EncodeRequest(const Request& q) {
  net::Writer w;
  w.Put<uint8_t>(static_cast<uint8_t>(q.op));
  if (HasKey(q.op)) w.PutBytes(q.key);
  switch (q.op) {
    case Op::kHello: w.Put<int32_t>(q.rank); break;
    case Op::kSet: w.PutBytes(q.value); break;
    case Op::kGet: w.Put<int64_t>(q.timeout_ms); break;
    case Op::kAdd: w.Put<int64_t>(q.delta); break;
    case Op::kWaitAtLeast:
    case Op::kGather:
      w.Put<int64_t>(q.target);
      w.Put<int64_t>(q.timeout_ms);
      break;
    case Op::kDelete:
    case Op::kBye: break;
  }
  return std::move(w.str());
}

Decoded DecodeRequest(std::string_view payload, Request* q) {
  net::Reader r(payload);
  uint8_t raw = 0;
  if (!r.Get(&raw)) return Decoded::kEmpty;
  q->op = static_cast<Op>(raw);
  if (HasKey(q->op) && (!r.GetBytes(&q->key) || q->key.size() > kMaxKey)) return Decoded::kBadKey;
  switch (q->op) {
    case Op::kHello: return Done(r.Get(&q->rank), r);
    case Op::kSet: return Done(r.GetBytes(&q->value) && q->value.size() <= kMaxValue, r);
    case Op::kGet: return Done(r.Get(&q->timeout_ms), r);
    case Op::kAdd: return Done(r.Get(&q->delta), r);
    case Op::kWaitAtLeast: return Done(r.Get(&q->target) && r.Get(&q->timeout_ms), r);
    case Op::kGather:
      return Done(r.Get(&q->target) && r.Get(&q->timeout_ms) && q->target >= 0 && q->target <= kMaxGather, r);
    case Op::kDelete:
    case Op::kBye: return Done(true, r);
  }
  return Decoded::kOk;  // an unknown type: the server answers that it is unknown
}

std::string EncodeReply(const Status& st, std::string_view fields) {
  net::Writer w;
  w.Put<int32_t>(st.raw_code());
  w.PutBytes(st.message());
  w.str().append(fields);
  return std::move(w.str());
}

std::optional<Reply> DecodeReply(std::string_view payload) {
  net::Reader r(payload);
  int32_t code = 0;
  std::string message;
  if (!r.Get(&code) || !r.GetBytes(&message) || message.size() > kMaxMessage) return std::nullopt;
  // A failure carries a nonzero hixl code; anything else is not one of ours.
  if (code > 0) return std::nullopt;
  Reply reply;
  reply.fields = std::string(payload.substr(sizeof(int32_t) + sizeof(uint32_t) + message.size()));
  if (code != 0) reply.status = Status(static_cast<Errc>(code), std::move(message));
  return reply;
}

std::string EncodeValue(std::string_view value) {
  net::Writer w;
  w.PutBytes(value);
  return std::move(w.str());
}

bool DecodeValue(std::string_view fields, std::string* value) {
  net::Reader r(fields);
  return r.GetBytes(value) && value->size() <= kMaxValue && r.empty();
}

std::string EncodeInt(int64_t v) {
  net::Writer w;
  w.Put<int64_t>(v);
  return std::move(w.str());
}

bool DecodeInt(std::string_view fields, int64_t* v) {
  net::Reader r(fields);
  return r.Get(v) && r.empty();
}

std::optional<std::string> EncodeValues(const std::vector<const std::string*>& values) {
  uint64_t bytes = sizeof(uint32_t);
  for (const std::string* v : values) bytes += sizeof(uint32_t) + v->size();
  if (bytes > kMaxGatherBytes || values.size() > static_cast<size_t>(kMaxGather)) return std::nullopt;
  net::Writer w;
  w.Put<uint32_t>(static_cast<uint32_t>(values.size()));
  for (const std::string* v : values) w.PutBytes(*v);
  return std::move(w.str());
}

bool DecodeValues(std::string_view fields, int64_t count, std::vector<std::string>* values) {
  if (fields.size() > kMaxGatherBytes) return false;
  net::Reader r(fields);
  uint32_t n = 0;
  if (!r.Get(&n) || static_cast<int64_t>(n) != count || count > kMaxGather) return false;
  // Each value takes at least its 4-byte length: more than that cannot be there.
  if (n > fields.size() / sizeof(uint32_t)) return false;
  values->clear();
  values->reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::string v;
    if (!r.GetBytes(&v) || v.size() > kMaxValue) return false;
    values->push_back(std::move(v));
  }
  return r.empty();
}

std::string GatherKey(std::string_view prefix, int64_t i) { return std::string(prefix) + std::to_string(i); }

}  // namespace hixl::bootstrap::detail
