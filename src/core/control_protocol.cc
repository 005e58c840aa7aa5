#include "core/control_protocol.h"

#include "base/socket.h"

namespace hixl::core {

namespace {

void PutAddresses(net::Writer& w, const PublishedAddresses& a) {
  w.Put<uint32_t>(static_cast<uint32_t>(a.size()));
  for (const PublishedAddress& p : a) w.PutBytes(p.kind).PutBytes(p.address);
}

bool GetAddresses(net::Reader& rd, PublishedAddresses* out) {
  uint32_t n = 0;
  if (!rd.Get(&n) || n > kMaxAddresses) return false;
  out->clear();
  for (uint32_t i = 0; i < n; ++i) {
    PublishedAddress p;
    if (!rd.GetBytes(&p.kind, kMaxNameBytes) || !rd.GetBytes(&p.address, kMaxAddressBytes)) return false;
    out->push_back(std::move(p));
  }
  return true;
}

}  // namespace

std::string Encode(const Invalidation& m) {
  net::Writer w;
  w.Put(m.generation).Put(m.base).Put(m.len);
  return std::move(w.str());
}

std::optional<Invalidation> DecodeInvalidation(std::string_view payload) {
  net::Reader rd(payload);
  Invalidation m;
  if (!rd.Get(&m.generation) || !rd.Get(&m.base) || !rd.Get(&m.len) || !rd.empty()) return std::nullopt;
  return m;
}

std::string Encode(const PeerRecord& m) {
  net::Writer w;
  w.PutBytes(m.host).Put<uint16_t>(m.port);
  PutAddresses(w, m.addresses);
  return std::move(w.str());
}

std::optional<PeerRecord> DecodePeerRecord(std::string_view bytes) {
  net::Reader rd(bytes);
  PeerRecord m;
  if (!rd.GetBytes(&m.host, kMaxNameBytes) || !rd.Get(&m.port) || !GetAddresses(rd, &m.addresses) || !rd.empty()) {
    return std::nullopt;
  }
  return m;
}

std::string Encode(const NamedNotify& m) {
  net::Writer w;
  w.PutBytes(m.name).PutBytes(m.msg);
  return std::move(w.str());
}

std::optional<NamedNotify> DecodeNamedNotify(std::string_view payload) {
  net::Reader rd(payload);
  NamedNotify m;
  if (!rd.GetBytes(&m.name, kMaxNamedNotifyBytes) || !rd.GetBytes(&m.msg, kMaxNamedNotifyBytes - m.name.size()) ||
      !rd.empty()) {
    return std::nullopt;
  }
  return m;
}

std::string Encode(const Hello& m) {
  net::Writer w;
  w.Put(m.uuid).PutBytes(m.name).PutBytes(m.callback_host).Put<uint16_t>(m.callback_port).Put<int64_t>(m.id_for_server);
  return std::move(w.str());
}

std::optional<Hello> DecodeHello(std::string_view payload) {
  net::Reader rd(payload);
  Hello m;
  if (!rd.Get(&m.uuid) || !rd.GetBytes(&m.name, kMaxNameBytes) || !rd.GetBytes(&m.callback_host, kMaxNameBytes) ||
      !rd.Get(&m.callback_port) || !rd.Get(&m.id_for_server) || !rd.empty()) {
    return std::nullopt;
  }
  return m;
}

std::string Encode(const HelloReply& m) {
  net::Writer w;
  w.Put(m.uuid).Put<int64_t>(m.id_for_client);
  PutAddresses(w, m.addresses);
  return std::move(w.str());
}

std::optional<HelloReply> DecodeHelloReply(std::string_view bytes) {
  net::Reader rd(bytes);
  HelloReply m;
  if (!rd.Get(&m.uuid) || !rd.Get(&m.id_for_client) || !GetAddresses(rd, &m.addresses) || !rd.empty()) {
    return std::nullopt;
  }
  return m;
}

}  // namespace hixl::core
