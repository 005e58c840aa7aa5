// The transports' own switches: the shared on/off parser (base/switch.h),
// each transport's parsing of its switches from a front door's settings or
// its HIXL_* variables, and the transport-neutral lists in transport.cc.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <set>
#include <string>

#include "base/switch.h"
#include "transport/shm/options.h"
#include "transport/transport.h"
#ifdef HIXL_HAVE_UCX
#include "transport/ucx/options.h"
#endif

namespace hixl::transport {
namespace {

// Sets a variable for one test and puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_, old_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

class TransportOptions : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"HIXL_SHM_CMA", "HIXL_SHM_THP", "HIXL_NET_DEV"}) ::unsetenv(v);
  }
};

TEST(SwitchParser, OnOffAndEmptyIsOn) {
  for (const char* off : {"0", "false", "no", "off"}) {
    Result<bool> r = ParseSwitch("X", off);
    ASSERT_TRUE(r.ok()) << off;
    EXPECT_FALSE(r.value()) << off;
  }
  for (const char* on : {"1", "true", "yes", "on", ""}) {
    Result<bool> r = ParseSwitch("X", on);
    ASSERT_TRUE(r.ok()) << on;
    EXPECT_TRUE(r.value()) << on;
  }
  for (const char* bad : {"maybe", "2", "ON", " 1"}) {
    Result<bool> r = ParseSwitch("HIXL_X", bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Errc::kInvalidArg);
    EXPECT_NE(r.status().message().find(std::string("HIXL_X='") + bad + "'"), std::string::npos)
        << r.status().message();
  }
}

TEST_F(TransportOptions, ShmDefaultsSettingsAndVariables) {
  Result<shm::ShmOptions> d = shm::ParseOptions(Options{});
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_TRUE(d.value().cma);
  EXPECT_TRUE(d.value().thp);

  Options o;
  o.settings = {{"shm_cma", "0"}, {"shm_thp", "off"}};
  Result<shm::ShmOptions> s = shm::ParseOptions(o);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s.value().cma);
  EXPECT_FALSE(s.value().thp);

  {
    ScopedEnv cma("HIXL_SHM_CMA", "no");
    ScopedEnv thp("HIXL_SHM_THP", "");
    Result<shm::ShmOptions> e = shm::ParseOptions(Options{});
    ASSERT_TRUE(e.ok()) << e.status().message();
    EXPECT_FALSE(e.value().cma);
    EXPECT_TRUE(e.value().thp);  // empty: on
    // A setting wins over the variable.
    Options given;
    given.settings["shm_cma"] = "yes";
    Result<shm::ShmOptions> g = shm::ParseOptions(given);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_TRUE(g.value().cma);
  }
}

TEST_F(TransportOptions, ShmMalformedNamesTheOptionOrVariable) {
  Options o;
  o.settings["shm_thp"] = "maybe";
  Result<shm::ShmOptions> s = shm::ParseOptions(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Errc::kInvalidArg);
  EXPECT_NE(s.status().message().find("option shm_thp='maybe'"), std::string::npos) << s.status().message();

  ScopedEnv cma("HIXL_SHM_CMA", "maybe");
  Result<shm::ShmOptions> e = shm::ParseOptions(Options{});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Errc::kInvalidArg);
  EXPECT_NE(e.status().message().find("HIXL_SHM_CMA='maybe'"), std::string::npos) << e.status().message();
  // CreateTransports refuses it before starting anything, whichever
  // transport is asked for.
  for (const char* only : {"", "shm"}) {
    Options c;
    c.only = only;
    auto t = CreateTransports(nullptr, c);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), Errc::kInvalidArg);
    EXPECT_NE(t.status().message().find("HIXL_SHM_CMA='maybe'"), std::string::npos) << t.status().message();
  }
}

#ifdef HIXL_HAVE_UCX
TEST_F(TransportOptions, UcxNetDevFromSettingOrVariable) {
  Result<ucx::UcxOptions> d = ucx::ParseOptions(Options{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().net_dev, "");
  ScopedEnv dev("HIXL_NET_DEV", "eth7");
  Result<ucx::UcxOptions> e = ucx::ParseOptions(Options{});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e.value().net_dev, "eth7");
  Options o;
  o.settings["net_dev"] = "mlx5_0:1";
  Result<ucx::UcxOptions> s = ucx::ParseOptions(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value().net_dev, "mlx5_0:1");
}

TEST_F(TransportOptions, UcxSpinFromSettingOrVariableAndBadValuesNamed) {
  Result<ucx::UcxOptions> d = ucx::ParseOptions(Options{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value().spin_us, 50);
  {
    ScopedEnv spin("HIXL_UCX_SPIN_US", "0");
    Result<ucx::UcxOptions> e = ucx::ParseOptions(Options{});
    ASSERT_TRUE(e.ok());
    EXPECT_EQ(e.value().spin_us, 0);
  }
  Options o;
  o.settings["ucx_spin_us"] = "200";
  Result<ucx::UcxOptions> s = ucx::ParseOptions(o);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s.value().spin_us, 200);
  for (const char* bad : {"-1", "100001", "fast", ""}) {
    ScopedEnv spin("HIXL_UCX_SPIN_US", bad);
    Result<ucx::UcxOptions> r = ucx::ParseOptions(Options{});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Errc::kInvalidArg) << bad;
    EXPECT_NE(r.status().message().find("HIXL_UCX_SPIN_US"), std::string::npos) << r.status().message();
  }
}
#endif

TEST(TransportLists, BuiltInNamesAndAllSwitches) {
  const std::vector<std::string> names = BuiltInNames();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "shm");  // preferred for same-host peers
  const bool ucx = std::find(names.begin(), names.end(), "ucx") != names.end();
#ifdef HIXL_HAVE_UCX
  EXPECT_TRUE(ucx);
#else
  EXPECT_FALSE(ucx);
#endif
  std::set<std::string> options, variables;
  for (const Switch& sw : AllSwitches()) {
    EXPECT_TRUE(options.insert(sw.option).second) << sw.option << " listed twice";
    variables.insert(sw.variable);
    EXPECT_EQ(std::string(sw.variable).rfind("HIXL_", 0), 0U) << sw.variable;
    EXPECT_FALSE(std::string(sw.help).empty()) << sw.option;
  }
  EXPECT_TRUE(options.count("shm_cma") && options.count("shm_thp"));
  EXPECT_TRUE(variables.count("HIXL_SHM_CMA") && variables.count("HIXL_SHM_THP"));
  EXPECT_EQ(options.count("net_dev") > 0, ucx);
}

TEST(TransportLists, CheckNameAcceptsBuiltInNamesOnly) {
  for (const std::string& n : BuiltInNames()) EXPECT_TRUE(CheckName("HIXL_TRANSPORT", n).ok()) << n;
  EXPECT_TRUE(CheckName("HIXL_TRANSPORT", "").ok());
  EXPECT_TRUE(CheckName("HIXL_TRANSPORT", "auto").ok());
  for (const char* bad : {"bogus", "SHM"}) {
    Status s = CheckName("HIXL_TRANSPORT", bad);
    EXPECT_EQ(s.code(), Errc::kInvalidArg) << bad;
    EXPECT_NE(s.message().find(std::string("HIXL_TRANSPORT='") + bad + "'"), std::string::npos) << s.message();
    for (const std::string& n : BuiltInNames()) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  }
  Options o;
  o.only = "bogus";
  auto t = CreateTransports(nullptr, o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Errc::kInvalidArg);
  EXPECT_NE(t.status().message().find("bogus"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace hixl::transport
