// The job secret and its handshake (base/auth.h), and the store and control
// listeners that require it.
#include "base/auth.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "bootstrap/control.h"
#include "bootstrap/env.h"
#include "bootstrap/store.h"

namespace hixl::auth {
namespace {

using Nonce = std::array<uint8_t, kNonceBytes>;
constexpr char kHexA[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr char kHexB[] = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

Secret S(const char* hex) { return ParseSecretHex(hex, "test").value(); }

TEST(AuthSecret, ParsesHexAndRefusesMalformed) {
  EXPECT_TRUE(ParseSecretHex(kHexA, "HIXL_SECRET").ok());
  auto short_one = ParseSecretHex("abcd", "HIXL_SECRET");
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.status().message().find("HIXL_SECRET: the job secret must be 64 hex digits"), std::string::npos)
      << short_one.status().message();
  std::string bad(kHexA);
  bad[10] = 'z';
  auto not_hex = ParseSecretHex(bad, "HIXL_SECRET");
  ASSERT_FALSE(not_hex.ok());
  EXPECT_NE(not_hex.status().message().find("not 64 hex digits"), std::string::npos);
  EXPECT_TRUE(S(kHexA) == S(kHexA));
  EXPECT_FALSE(S(kHexA) == S(kHexB));
}

TEST(AuthSecret, FromVariables) {
  auto none = SecretFromVariables(std::nullopt, std::nullopt);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto both = SecretFromVariables(std::string(kHexA), std::string("/nonexistent"));
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both HIXL_SECRET and HIXL_SECRET_FILE"), std::string::npos);
  auto hex = SecretFromVariables(std::string(kHexA) + "\n", std::nullopt);
  ASSERT_TRUE(hex.ok());
  EXPECT_TRUE(**hex == S(kHexA));
}

TEST(AuthSecret, FileMustBePrivate) {
  char path[] = "/tmp/hixl-secret-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string text = std::string(kHexB) + "\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  ASSERT_EQ(::chmod(path, 0600), 0);
  auto ok = SecretFromVariables(std::nullopt, std::string(path));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(**ok == S(kHexB));
  ASSERT_EQ(::chmod(path, 0640), 0);
  auto open = LoadSecretFile(path);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("accessible by group or others"), std::string::npos)
      << open.status().message();
  ::unlink(path);
  auto gone = LoadSecretFile(path);
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("cannot open"), std::string::npos);
}

TEST(AuthSecret, NewSecretsAreFreshAndParse) {
  const std::string a = NewSecretHex(), b = NewSecretHex();
  EXPECT_NE(a, b);
  EXPECT_TRUE(ParseSecretHex(a, "new").ok());
}

TEST(AuthSecret, TheWorldReadsItFromTheEnvironment) {
  std::map<std::string, std::string> vars;
  bootstrap::GetEnv env = [&](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  auto none = bootstrap::ParseConfig(env);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->secret.has_value());
  vars["HIXL_SECRET"] = kHexA;
  auto set = bootstrap::ParseConfig(env);
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(set->secret.has_value());
  EXPECT_TRUE(*set->secret == S(kHexA));
  vars["HIXL_SECRET"] = "xyz";
  auto bad = bootstrap::ParseConfig(env);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Errc::kBootstrap);
  EXPECT_NE(bad.status().message().find("HIXL_SECRET"), std::string::npos) << bad.status().message();
}

// One whole exchange in memory; returns the first error.
Status Exchange(const MaybeSecret& server, const MaybeSecret& client, Kind kind = Kind::kStore,
                Kind client_kind = Kind::kStore) {
  Nonce ns{}, nc{}, ns_seen{};
  const std::string greeting = MakeGreeting(server, kind, &ns);
  HIXL_ASSIGN_OR_RETURN(std::string resp, RespondToGreeting(client, client_kind, greeting, &nc, &ns_seen, "srv"));
  if (!server) return Status::Ok();
  HIXL_ASSIGN_OR_RETURN(std::string proof, CheckResponse(*server, kind, ns, resp));
  return CheckServerProof(*client, client_kind, nc, ns_seen, proof, "srv");
}

void ExpectError(const Status& s, const std::string& part) {
  ASSERT_FALSE(s.ok()) << "expected an error with: " << part;
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

TEST(AuthHandshake, RightSecretPasses) {
  EXPECT_TRUE(Exchange(S(kHexA), S(kHexA)).ok());
  EXPECT_TRUE(Exchange(std::nullopt, std::nullopt).ok());
}

TEST(AuthHandshake, WrongOrMissingSecretFails) {
  ExpectError(Exchange(S(kHexA), S(kHexB)), "wrong proof of the job secret");
  ExpectError(Exchange(S(kHexA), std::nullopt), "requires the job secret and this process has none");
  ExpectError(Exchange(std::nullopt, S(kHexA)), "does not authenticate");
  ExpectError(Exchange(S(kHexA), S(kHexA), Kind::kStore, Kind::kControl), "a hixl store listener, not a control");
}

TEST(AuthHandshake, GarbageTruncatedAndReplayedFail) {
  Nonce nc{}, ns{};
  ExpectError(RespondToGreeting(S(kHexA), Kind::kStore, "GET / HTTP/1.0\r\n\r\n", &nc, &ns, "srv").status(),
              "srv is not a hixl store listener");
  std::string greeting = MakeGreeting(S(kHexA), Kind::kStore, &ns);
  ExpectError(RespondToGreeting(S(kHexA), Kind::kStore, greeting.substr(0, 20), &nc, &ns, "srv").status(),
              "not a hixl");
  Nonce server_nonce{};
  greeting = MakeGreeting(S(kHexA), Kind::kStore, &server_nonce);
  auto resp = RespondToGreeting(S(kHexA), Kind::kStore, greeting, &nc, &ns, "srv");
  ASSERT_TRUE(resp.ok());
  ExpectError(CheckResponse(S(kHexA), Kind::kStore, server_nonce, resp->substr(0, 40)).status(), "has 40 bytes");
  std::string garbage(kResponseBytes, 'x');
  ExpectError(CheckResponse(S(kHexA), Kind::kStore, server_nonce, garbage).status(), "wrong proof");
  // A recorded response answers only the challenge it was made for.
  Nonce fresh{};
  MakeGreeting(S(kHexA), Kind::kStore, &fresh);
  ASSERT_NE(fresh, server_nonce);
  ExpectError(CheckResponse(S(kHexA), Kind::kStore, fresh, *resp).status(), "wrong proof");
  // Nor does it prove anything to another kind of listener.
  ExpectError(CheckResponse(S(kHexA), Kind::kControl, server_nonce, *resp).status(), "wrong proof");
  // A server's proof from another secret is refused by the client.
  auto proof = CheckResponse(S(kHexA), Kind::kStore, server_nonce, *resp);
  ASSERT_TRUE(proof.ok());
  EXPECT_TRUE(CheckServerProof(S(kHexA), Kind::kStore, nc, ns, *proof, "srv").ok());
  ExpectError(CheckServerProof(S(kHexB), Kind::kStore, nc, ns, *proof, "srv"), "srv gave a wrong proof");
}

// The server half over a socket pair, driven by poll as the servers do.
ServerHandshake::Step Serve(int fd, const MaybeSecret& secret, int64_t timeout_ms, std::string* why) {
  ServerHandshake hs(secret, Kind::kShm, timeout_ms);
  ServerHandshake::Step step = hs.Start(fd);
  while (step == ServerHandshake::Step::kWaiting && net::Clock::now() < hs.deadline()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, net::MsLeft(hs.deadline())) > 0) step = hs.OnReadable(fd);
  }
  *why = hs.error();
  return step;
}

struct Pair {
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    server = net::Fd(sv[0]);
    client = net::Fd(sv[1]);
  }
  net::Fd server, client;
};

TEST(AuthHandshake, OverASocket) {
  for (const char* client_hex : {kHexA, kHexB}) {
    Pair p;
    std::string why;
    auto server = std::async(std::launch::async, [&] {
      ServerHandshake::Step step = Serve(p.server.get(), S(kHexA), 5000, &why);
      if (step != ServerHandshake::Step::kDone) p.server.Reset();  // as the servers close a peer that failed
      return step;
    });
    Status c = ClientHandshake(p.client.get(), S(client_hex), Kind::kShm, net::DeadlineIn(5000), "the peer");
    if (client_hex == kHexA) {
      EXPECT_TRUE(c.ok()) << c.message();
      EXPECT_EQ(server.get(), ServerHandshake::Step::kDone);
    } else {
      EXPECT_EQ(server.get(), ServerHandshake::Step::kFailed);
      EXPECT_NE(why.find("wrong proof"), std::string::npos) << why;
      ExpectError(c, "the peer refused this process's proof");
    }
  }
}

TEST(AuthHandshake, TruncatedAndSilentClientsFail) {
  Pair p;
  std::string why;
  auto server = std::async(std::launch::async, [&] { return Serve(p.server.get(), S(kHexA), 5000, &why); });
  char greeting[kGreetingBytes];
  ASSERT_TRUE(net::RecvAll(p.client.get(), greeting, sizeof(greeting), net::DeadlineIn(5000)).ok());
  ASSERT_EQ(::send(p.client.get(), "0123456789", 10, MSG_NOSIGNAL), 10);
  p.client.Reset();
  EXPECT_EQ(server.get(), ServerHandshake::Step::kFailed);
  EXPECT_NE(why.find("closed the connection after 10 bytes"), std::string::npos) << why;

  Pair q;
  EXPECT_EQ(Serve(q.server.get(), S(kHexA), 50, &why), ServerHandshake::Step::kWaiting);  // out of time
}

// ---- the listeners

TEST(AuthListeners, StoreAdmitsOnlyTheSecret) {
  auto server = bootstrap::TcpStoreServer::Start("127.0.0.1", 0, 2, S(kHexA));
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint16_t port = server.value()->port();
  auto wrong = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, 1, 5000, S(kHexB));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("refused this process's proof"), std::string::npos)
      << wrong.status().message();
  auto none = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, 1, 5000);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("requires the job secret"), std::string::npos) << none.status().message();
  // A stranger that speaks the store protocol at once is closed, unanswered.
  auto raw = net::Connect("127.0.0.1", port, net::DeadlineIn(5000));
  ASSERT_TRUE(raw.ok());
  std::string hello(100, '\0');
  ASSERT_TRUE(net::SendAll(raw->get(), hello.data(), hello.size(), net::DeadlineIn(5000)).ok());
  char buf[256];
  ASSERT_TRUE(net::RecvAll(raw->get(), buf, kGreetingBytes, net::DeadlineIn(5000)).ok());
  EXPECT_EQ(net::RecvAll(raw->get(), buf, 1, net::DeadlineIn(5000)).code(), Errc::kPeerFailed);  // closed
  // The ranks with the secret are served as usual.
  auto good = bootstrap::TcpStoreClient::Connect("127.0.0.1", port, 1, 5000, S(kHexA));
  ASSERT_TRUE(good.ok()) << good.status().message();
  ASSERT_TRUE(good.value()->Set("k", "v").ok());
  auto got = good.value()->Get("k", 1000);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "v");
  EXPECT_TRUE(good.value()->Close().ok());
}

TEST(AuthListeners, ControlAdmitsOnlyTheSecret) {
  auto handler = [](int, uint8_t, std::string_view) -> Result<std::string> { return std::string("pong"); };
  auto server = bootstrap::ControlServer::Start("127.0.0.1", handler, 0, S(kHexA));
  ASSERT_TRUE(server.ok()) << server.status().message();
  const uint16_t port = server.value()->port();
  bootstrap::ControlClient wrong(1, 0, "127.0.0.1", port, "the peer", S(kHexB));
  ExpectError(wrong.Call(1, "ping", 5000).status(), "the peer at 127.0.0.1");
  bootstrap::ControlClient none(1, 0, "127.0.0.1", port, "the peer");
  ExpectError(none.Call(1, "ping", 5000).status(), "requires the job secret");
  bootstrap::ControlClient good(1, 0, "127.0.0.1", port, "the peer", S(kHexA));
  auto r = good.Call(1, "ping", 5000);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "pong");
  // Without secrets on either side nothing changes.
  auto open = bootstrap::ControlServer::Start("127.0.0.1", handler);
  ASSERT_TRUE(open.ok());
  bootstrap::ControlClient plain(1, 0, "127.0.0.1", open.value()->port(), "the peer");
  EXPECT_TRUE(plain.Call(1, "ping", 5000).ok());
  bootstrap::ControlClient keyed(1, 0, "127.0.0.1", open.value()->port(), "the peer", S(kHexA));
  ExpectError(keyed.Call(1, "ping", 5000).status(), "does not authenticate");
}

}  // namespace
}  // namespace hixl::auth
