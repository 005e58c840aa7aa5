// The one table of error codes (include/hixl/hixl_errors.h) and everything
// that follows from it: the C codes, hixl::Errc, hixl_strerror / ErrcName,
// the engine's CANN status for each code and EngineStatusName, and
// Result<T>'s no-throw value().
#include <gtest/gtest.h>

#include <hixl/hixl.h>
#include <hixl/hixl_errors.h>
#include <hixl/engine.hpp>
#include <hixl/hixl.hpp>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine_status.h"

namespace hixl {
namespace {

struct Row {
  const char* c_name;
  Errc errc;
  int value;
  const char* description;
  EngineStatus engine;
  const char* engine_name;
  const char* py_class;
};

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = {
#define HIXL_TEST_ROW_(c_name, cxx_name, value, desc, engine, py) \
  {#c_name, Errc::cxx_name, value, desc, ::hixl::engine, #engine, #py},
      HIXL_ERROR_CODES(HIXL_TEST_ROW_)
#undef HIXL_TEST_ROW_
  };
  return rows;
}

struct EngineRow {
  const char* name;
  EngineStatus value;
  const char* description;
  const char* py_class;
};

const std::vector<EngineRow>& EngineRows() {
  static const std::vector<EngineRow> rows = {
#define HIXL_TEST_ENGINE_ROW_(name, value, desc, py) {#name, value, desc, #py},
      HIXL_ENGINE_STATUSES(HIXL_TEST_ENGINE_ROW_)
#undef HIXL_TEST_ENGINE_ROW_
  };
  return rows;
}

TEST(ErrorTable, EveryCodeHasAUniqueNumberNameDescriptionAndClass) {
  std::set<int> values;
  std::set<std::string> names, descriptions, classes;
  for (const Row& r : Rows()) {
    EXPECT_TRUE(values.insert(r.value).second) << r.c_name;
    EXPECT_TRUE(names.insert(r.c_name).second) << r.c_name;
    EXPECT_TRUE(classes.insert(r.py_class).second) << r.c_name << " " << r.py_class;
    EXPECT_GT(std::strlen(r.description), 0u) << r.c_name;
    descriptions.insert(r.description);
    EXPECT_EQ(static_cast<int>(r.errc), r.value) << r.c_name;
    EXPECT_TRUE(IsKnownErrc(r.value)) << r.c_name;
    const std::string name = r.c_name;
    EXPECT_TRUE(name == "HIXL_SUCCESS" || name.rfind("HIXL_ERR_", 0) == 0) << name;
  }
  EXPECT_EQ(descriptions.size(), Rows().size());
  // 0, -1, -2, ... in order without gaps; HIXL_SUCCESS first.
  for (size_t i = 0; i < Rows().size(); ++i) EXPECT_EQ(Rows()[i].value, -static_cast<int>(i));
  EXPECT_STREQ(Rows().front().c_name, "HIXL_SUCCESS");
  EXPECT_STREQ(Rows().front().py_class, "None");
  EXPECT_FALSE(IsKnownErrc(1));
  EXPECT_FALSE(IsKnownErrc(-static_cast<int>(Rows().size())));
}

TEST(ErrorTable, TheCCodesAreTheTableAndTheCxxEnum) {
  // Each literal of hixl.h against its row (the build checks these too, in
  // src/base/status.cc), and usable in a switch as before.
  const std::vector<std::pair<int, Errc>> c_codes = {
      {HIXL_SUCCESS, Errc::kOk},
      {HIXL_ERR_INVALID_ARG, Errc::kInvalidArg},
      {HIXL_ERR_NOT_INITIALIZED, Errc::kNotInitialized},
      {HIXL_ERR_NOT_REGISTERED, Errc::kNotRegistered},
      {HIXL_ERR_INVALID_RANK, Errc::kInvalidRank},
      {HIXL_ERR_TIMEOUT, Errc::kTimeout},
      {HIXL_ERR_PEER_FAILED, Errc::kPeerFailed},
      {HIXL_ERR_NO_MEMORY, Errc::kNoMemory},
      {HIXL_ERR_TRANSPORT, Errc::kTransport},
      {HIXL_ERR_UNSUPPORTED, Errc::kUnsupported},
      {HIXL_ERR_ALREADY_INITIALIZED, Errc::kAlreadyInitialized},
      {HIXL_ERR_BOOTSTRAP, Errc::kBootstrap},
      {HIXL_ERR_INTERNAL, Errc::kInternal},
      {HIXL_ERR_QUEUE_FULL, Errc::kQueueFull},
      {HIXL_ERR_NOT_CONNECTED, Errc::kNotConnected},
      {HIXL_ERR_ALREADY_CONNECTED, Errc::kAlreadyConnected},
  };
  ASSERT_EQ(c_codes.size(), Rows().size()) << "a row of HIXL_ERROR_CODES has no HIXL_ERR_* here, or the reverse";
  for (size_t i = 0; i < c_codes.size(); ++i) {
    EXPECT_EQ(c_codes[i].first, Rows()[i].value) << Rows()[i].c_name;
    EXPECT_EQ(c_codes[i].second, Rows()[i].errc) << Rows()[i].c_name;
  }
  int seen = 0;
  switch (HIXL_ERR_ALREADY_CONNECTED) {
    case HIXL_ERR_NOT_CONNECTED: seen = 1; break;
    case HIXL_ERR_ALREADY_CONNECTED: seen = 2; break;
    default: break;
  }
  EXPECT_EQ(seen, 2);
#if HIXL_ERR_ALREADY_CONNECTED != -15
#error "HIXL_ERR_ALREADY_CONNECTED must be usable in #if"
#endif
}

TEST(ErrorTable, StrerrorAndNamesForEveryCodeAndUnknownOnes) {
  for (const Row& r : Rows()) {
    EXPECT_EQ(std::string(hixl_strerror(r.value)), std::string(r.c_name) + ": " + r.description);
    EXPECT_STREQ(ErrcName(r.value), r.c_name);
    EXPECT_STREQ(ErrcDescription(r.value), r.description);
    if (r.value != 0) {
      EXPECT_EQ(Status(r.errc, "why").ToString(), std::string(r.c_name) + ": why");
    }
  }
  EXPECT_EQ(Status().ToString(), "HIXL_SUCCESS");
  for (int unknown : {1, 7, -static_cast<int>(Rows().size()), -999, -2147483647 - 1}) {
    EXPECT_STREQ(hixl_strerror(unknown), "HIXL_ERR_UNKNOWN: unknown error code") << unknown;
    EXPECT_STREQ(ErrcName(unknown), "HIXL_ERR_UNKNOWN") << unknown;
    EXPECT_STREQ(ErrcDescription(unknown), "unknown error code") << unknown;
  }
}

TEST(ErrorTable, EveryCodeMapsToItsEngineStatus) {
  for (const Row& r : Rows()) {
    EXPECT_EQ(engine::StatusFor(r.errc), r.engine) << r.c_name;
    EXPECT_STREQ(EngineStatusName(engine::StatusFor(r.errc)), r.engine_name) << r.c_name;
  }
  // The pairs the engine documents (docs/engine.md), spelled out.
  EXPECT_EQ(engine::StatusFor(Errc::kOk), SUCCESS);
  EXPECT_EQ(engine::StatusFor(Errc::kInvalidArg), PARAM_INVALID);
  EXPECT_EQ(engine::StatusFor(Errc::kNotRegistered), PARAM_INVALID);
  EXPECT_EQ(engine::StatusFor(Errc::kTimeout), TIMEOUT);
  EXPECT_EQ(engine::StatusFor(Errc::kNotConnected), NOT_CONNECTED);
  EXPECT_EQ(engine::StatusFor(Errc::kAlreadyConnected), ALREADY_CONNECTED);
  EXPECT_EQ(engine::StatusFor(Errc::kAlreadyInitialized), FAILED);
  EXPECT_EQ(engine::StatusFor(Errc::kUnsupported), UNSUPPORTED);
  EXPECT_EQ(engine::StatusFor(Errc::kQueueFull), RESOURCE_EXHAUSTED);
  EXPECT_EQ(engine::StatusFor(Errc::kPeerFailed), FAILED);
  EXPECT_EQ(engine::StatusFor(static_cast<Errc>(-999)), FAILED);  // a number that is no code
}

TEST(ErrorTable, EngineStatusesKeepTheirCannNumbersAndNames) {
  EXPECT_EQ(SUCCESS, 0u);
  EXPECT_EQ(PARAM_INVALID, 103900u);
  EXPECT_EQ(TIMEOUT, 103901u);
  EXPECT_EQ(NOT_CONNECTED, 103902u);
  EXPECT_EQ(ALREADY_CONNECTED, 103903u);
  EXPECT_EQ(UNSUPPORTED, 103905u);
  EXPECT_EQ(RESOURCE_EXHAUSTED, 203900u);
  EXPECT_EQ(FAILED, 503900u);
  std::set<EngineStatus> values;
  std::set<std::string> names;
  for (const EngineRow& r : EngineRows()) {
    EXPECT_TRUE(values.insert(r.value).second) << r.name;
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_GT(std::strlen(r.description), 0u) << r.name;
    EXPECT_STREQ(EngineStatusName(r.value), r.name);
  }
  EXPECT_EQ(EngineRows().size(), 8u);
  EXPECT_STREQ(EngineStatusName(1), "UNKNOWN");
  EXPECT_STREQ(EngineStatusName(103904), "UNKNOWN");
}

TEST(ResultDeathTest, ValueOnAnErrorAbortsWithTheStatusInsteadOfThrowing) {
  Result<int> good(7);
  EXPECT_EQ(good.value(), 7);
  EXPECT_TRUE(good.status().ok());
  Result<int> bad(Errc::kTimeout, "the peer was slow");
  EXPECT_EQ(bad.status().code(), Errc::kTimeout);
  EXPECT_DEATH((void)bad.value(), "Result::value\\(\\) called on an error.*HIXL_ERR_TIMEOUT: the peer was slow");
  Result<std::string> bad_str(Errc::kInvalidArg, "no");
  EXPECT_DEATH((void)bad_str->size(), "HIXL_ERR_INVALID_ARG: no");
}

}  // namespace
}  // namespace hixl
