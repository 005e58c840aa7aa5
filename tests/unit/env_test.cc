// Unit tests of the environment parser (src/bootstrap/env.h).
//
// ParseConfig reads variables through an injected GetEnv, so every test
// describes its environment as a std::map and nothing touches the process's
// real environment.
#include "bootstrap/env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <ostream>
#include <string>

namespace hixl {
// Lets GoogleTest print "HIXL_ERR_BOOTSTRAP" instead of the enum's bytes.
inline void PrintTo(Errc code, std::ostream* os) { *os << ErrcName(static_cast<int>(code)); }
}  // namespace hixl

namespace hixl::bootstrap {
namespace {

using ::testing::HasSubstr;
using Vars = std::map<std::string, std::string>;

GetEnv FromMap(const Vars& vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Result<Config> Parse(const Vars& vars) { return ParseConfig(FromMap(vars)); }

// Parses vars, expecting success.
Config ParseOk(const Vars& vars) {
  Result<Config> r = Parse(vars);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : Config{};
}

// Parses vars, expecting a kBootstrap error; returns its message.
std::string ParseError(const Vars& vars) {
  Result<Config> r = Parse(vars);
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), Errc::kBootstrap) << r.status().ToString();
  EXPECT_FALSE(r.status().message().empty());
  return r.status().message();
}

// --------------------------------------------------------------- defaults

TEST(EnvTest, NoVariablesIsAWorldOfOne) {
  Config c = ParseOk({});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, 0);
  EXPECT_EQ(c.timeout_ms, 60000);
  EXPECT_EQ(c.transport, "");
  EXPECT_TRUE(c.transport_settings.empty());
  EXPECT_EQ(c.net_dev, "");
  EXPECT_EQ(c.log_level, "warn");
  EXPECT_EQ(c.rank_source, "none");
}

TEST(EnvTest, UnrelatedVariablesAreIgnored) {
  Config c = ParseOk({{"HOME", "/root"}, {"PATH", "/usr/bin"}, {"RANKS", "3"}, {"SIZE", "9"}});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
}

TEST(EnvTest, ProcessEnvReadsTheRealEnvironment) {
  GetEnv env = ProcessEnv();
  ASSERT_EQ(::setenv("HIXL_ENV_TEST_PROBE", "value 1", 1), 0);
  EXPECT_EQ(env("HIXL_ENV_TEST_PROBE"), std::optional<std::string>("value 1"));
  ASSERT_EQ(::unsetenv("HIXL_ENV_TEST_PROBE"), 0);
  EXPECT_EQ(env("HIXL_ENV_TEST_PROBE"), std::nullopt);
}

// ---------------------------------------------------------------- torchrun

TEST(EnvTest, TorchrunVariables) {
  Config c = ParseOk({{"RANK", "3"},
                      {"WORLD_SIZE", "8"},
                      {"LOCAL_RANK", "1"},
                      {"MASTER_ADDR", "node7.example"},
                      {"MASTER_PORT", "29500"}});
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.master_addr, "node7.example");
  EXPECT_EQ(c.master_port, 29500);
  EXPECT_THAT(c.rank_source, HasSubstr("torchrun"));
}

TEST(EnvTest, LocalRankDefaultsToRank) {
  Config c = ParseOk({{"RANK", "5"}, {"WORLD_SIZE", "6"}, {"MASTER_PORT", "1234"}});
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.local_rank, 5);
  EXPECT_EQ(c.master_addr, "127.0.0.1");
}

TEST(EnvTest, WorldOfOneNeedsNoMasterPort) {
  Config c = ParseOk({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 1);
  EXPECT_EQ(c.master_port, 0);
}

TEST(EnvTest, PortLimits) {
  EXPECT_EQ(ParseOk({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}).master_port, 1);
  EXPECT_EQ(ParseOk({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"}}).master_port, 65535);
}

// ---------------------------------------------------------------- fallbacks

TEST(EnvTest, OpenMpiVariables) {
  Config c = ParseOk({{"OMPI_COMM_WORLD_RANK", "2"},
                      {"OMPI_COMM_WORLD_SIZE", "4"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                      {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 4);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.master_port, 4000);
  EXPECT_THAT(c.rank_source, HasSubstr("Open MPI"));
}

TEST(EnvTest, PmiVariables) {
  Config c = ParseOk({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "1"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_THAT(c.rank_source, HasSubstr("PMI"));
}

TEST(EnvTest, SlurmVariables) {
  Config c = ParseOk({{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_LOCALID", "2"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 6);
  EXPECT_EQ(c.world_size, 7);
  EXPECT_EQ(c.local_rank, 2);
  EXPECT_THAT(c.rank_source, HasSubstr("Slurm"));
}

TEST(EnvTest, FallbackLocalRankDefaultsToRank) {
  Config c = ParseOk({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.local_rank, 3);
}

TEST(EnvTest, TorchrunWinsOverEveryOther) {
  Config c = ParseOk({{"RANK", "1"},
                      {"WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "5"},
                      {"PMI_RANK", "4"},
                      {"PMI_SIZE", "6"},
                      {"SLURM_PROCID", "5"},
                      {"SLURM_NTASKS", "7"},
                      {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.local_rank, 1);  // not OMPI_COMM_WORLD_LOCAL_RANK etc.
  EXPECT_THAT(c.rank_source, HasSubstr("torchrun"));
}

TEST(EnvTest, OpenMpiWinsOverPmiAndSlurm) {
  Config c = ParseOk({{"OMPI_COMM_WORLD_RANK", "3"},
                      {"OMPI_COMM_WORLD_SIZE", "5"},
                      {"PMI_RANK", "4"},
                      {"PMI_SIZE", "6"},
                      {"SLURM_PROCID", "5"},
                      {"SLURM_NTASKS", "7"},
                      {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 3);
  EXPECT_EQ(c.world_size, 5);
  EXPECT_THAT(c.rank_source, HasSubstr("Open MPI"));
}

TEST(EnvTest, PmiWinsOverSlurm) {
  Config c = ParseOk(
      {{"PMI_RANK", "4"}, {"PMI_SIZE", "6"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.rank, 4);
  EXPECT_EQ(c.world_size, 6);
  EXPECT_THAT(c.rank_source, HasSubstr("PMI"));
}

TEST(EnvTest, ChosenSourceIsValidatedAndLowerOnesIgnored) {
  // Garbage in a less preferred source does not matter...
  Config c = ParseOk({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "junk"}, {"MASTER_PORT", "4000"}});
  EXPECT_EQ(c.world_size, 2);
  // ...but garbage in the preferred one is not papered over by a lower one.
  EXPECT_THAT(
      ParseError(
          {{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"MASTER_PORT", "4000"}}),
      HasSubstr("RANK"));
}

// ------------------------------------------------------------- bad values

TEST(EnvTest, NonIntegerRank) {
  std::string m = ParseError({{"RANK", "one"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}});
  EXPECT_THAT(m, HasSubstr("RANK"));
  EXPECT_THAT(m, HasSubstr("one"));
  EXPECT_THAT(m, HasSubstr("not an integer"));
}

TEST(EnvTest, NonIntegerWorldSize) {
  std::string m = ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2x"}, {"MASTER_PORT", "4000"}});
  EXPECT_THAT(m, HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(m, HasSubstr("2x"));
}

TEST(EnvTest, EmptyAndSpacedIntegersAreRejected) {
  EXPECT_THAT(ParseError({{"RANK", ""}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}), HasSubstr("RANK"));
  EXPECT_THAT(ParseError({{"RANK", " 1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}), HasSubstr("RANK"));
  EXPECT_THAT(ParseError({{"RANK", "1"}, {"WORLD_SIZE", "2 "}, {"MASTER_PORT", "4000"}}), HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(ParseError({{"RANK", "1.0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}), HasSubstr("RANK"));
}

TEST(EnvTest, RankNotBelowWorldSize) {
  std::string m = ParseError({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "4000"}});
  EXPECT_THAT(m, HasSubstr("RANK"));
  EXPECT_THAT(m, HasSubstr("out of range"));
  EXPECT_THAT(ParseError({{"OMPI_COMM_WORLD_RANK", "9"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("OMPI_COMM_WORLD_RANK"));
}

TEST(EnvTest, NegativeValues) {
  EXPECT_THAT(ParseError({{"RANK", "-1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}}), HasSubstr("RANK"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "-2"}, {"MASTER_PORT", "4000"}}), HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "-1"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("LOCAL_RANK"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "-5"}}), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(ParseError({{"HIXL_TIMEOUT_MS", "-1"}}), HasSubstr("HIXL_TIMEOUT_MS"));
}

TEST(EnvTest, HugeValuesDoNotOverflow) {
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999999"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("WORLD_SIZE"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "4294967297"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("WORLD_SIZE"));
}

TEST(EnvTest, BadLocalRank) {
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "a"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("LOCAL_RANK"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}, {"MASTER_PORT", "4000"}}),
              HasSubstr("LOCAL_RANK"));
  EXPECT_THAT(ParseError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "z"}, {"MASTER_PORT", "1"}}),
              HasSubstr("SLURM_LOCALID"));
}

TEST(EnvTest, HalfSetPairs) {
  std::string m = ParseError({{"RANK", "0"}});
  EXPECT_THAT(m, HasSubstr("RANK"));
  EXPECT_THAT(m, HasSubstr("WORLD_SIZE"));
  m = ParseError({{"WORLD_SIZE", "2"}, {"MASTER_PORT", "4000"}});
  EXPECT_THAT(m, HasSubstr("WORLD_SIZE is set but RANK is not"));
  EXPECT_THAT(ParseError({{"OMPI_COMM_WORLD_SIZE", "2"}}), HasSubstr("OMPI_COMM_WORLD_RANK"));
  EXPECT_THAT(ParseError({{"PMI_RANK", "0"}}), HasSubstr("PMI_SIZE"));
  EXPECT_THAT(ParseError({{"SLURM_PROCID", "0"}}), HasSubstr("SLURM_NTASKS"));
  // A half-set preferred pair is an error even when a lower source is complete.
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}), HasSubstr("WORLD_SIZE"));
}

TEST(EnvTest, WorldAboveOneNeedsMasterPort) {
  std::string m = ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_THAT(m, HasSubstr("MASTER_PORT"));
  EXPECT_THAT(m, HasSubstr("2 ranks"));
  EXPECT_THAT(ParseError({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MASTER_ADDR", "10.0.0.1"}}),
              HasSubstr("MASTER_PORT"));
}

TEST(EnvTest, MasterPortOutOfRange) {
  std::string m = ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  EXPECT_THAT(m, HasSubstr("MASTER_PORT"));
  EXPECT_THAT(m, HasSubstr("70000"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}), HasSubstr("MASTER_PORT"));
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}}), HasSubstr("MASTER_PORT"));
  // Checked even in a world of one.
  EXPECT_THAT(ParseError({{"MASTER_PORT", "65536"}}), HasSubstr("MASTER_PORT"));
}

TEST(EnvTest, EmptyMasterAddr) {
  EXPECT_THAT(ParseError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}, {"MASTER_PORT", "4000"}}),
              HasSubstr("MASTER_ADDR"));
}

// HIXL_TRANSPORT's name is checked by the transports (transport::CheckName,
// tests/unit/transport_options_test.cc), HIXL_SHM_CMA and the like by the
// transport they belong to: the bootstrap passes them on.
TEST(EnvTest, TransportSwitchesAreLeftToTheTransports) {
  Config c = ParseOk({{"HIXL_TRANSPORT", "bogus"}, {"HIXL_SHM_CMA", "maybe"}});
  EXPECT_EQ(c.transport, "bogus");
  EXPECT_TRUE(c.transport_settings.empty());
}

TEST(EnvTest, BadLogLevel) {
  std::string m = ParseError({{"HIXL_LOG_LEVEL", "loud"}});
  EXPECT_THAT(m, HasSubstr("HIXL_LOG_LEVEL"));
  EXPECT_THAT(m, HasSubstr("loud"));
}

TEST(EnvTest, BadTimeout) {
  std::string m = ParseError({{"HIXL_TIMEOUT_MS", "0"}});
  EXPECT_THAT(m, HasSubstr("HIXL_TIMEOUT_MS"));
  EXPECT_THAT(ParseError({{"HIXL_TIMEOUT_MS", "10s"}}), HasSubstr("HIXL_TIMEOUT_MS"));
  EXPECT_THAT(ParseError({{"HIXL_TIMEOUT_MS", ""}}), HasSubstr("HIXL_TIMEOUT_MS"));
}

// ----------------------------------------------------------- hixl settings

TEST(EnvTest, TimeoutParsed) {
  EXPECT_EQ(ParseOk({{"HIXL_TIMEOUT_MS", "1"}}).timeout_ms, 1);
  EXPECT_EQ(ParseOk({{"HIXL_TIMEOUT_MS", "2500"}}).timeout_ms, 2500);
  EXPECT_EQ(ParseOk({{"HIXL_TIMEOUT_MS", "86400000"}}).timeout_ms, 86400000);
}

TEST(EnvTest, TransportParsed) {
  EXPECT_EQ(ParseOk({{"HIXL_TRANSPORT", "shm"}}).transport, "shm");
  EXPECT_EQ(ParseOk({{"HIXL_TRANSPORT", "ucx"}}).transport, "ucx");
  EXPECT_EQ(ParseOk({{"HIXL_TRANSPORT", "auto"}}).transport, "");
  EXPECT_EQ(ParseOk({{"HIXL_TRANSPORT", ""}}).transport, "");
}

TEST(EnvTest, NetDevParsed) { EXPECT_EQ(ParseOk({{"HIXL_NET_DEV", "mlx5_0:1"}}).net_dev, "mlx5_0:1"); }

TEST(EnvTest, LogLevelParsed) {
  for (const char* level : {"error", "warn", "info", "debug", "trace"}) {
    EXPECT_EQ(ParseOk({{"HIXL_LOG_LEVEL", level}}).log_level, level);
  }
}

TEST(EnvTest, BarrierSpinParsed) {
  EXPECT_EQ(ParseOk({}).barrier_spin_us, 1000);
  EXPECT_EQ(ParseOk({{"HIXL_BARRIER_SPIN_US", "0"}}).barrier_spin_us, 0);
  EXPECT_EQ(ParseOk({{"HIXL_BARRIER_SPIN_US", "250"}}).barrier_spin_us, 250);
  EXPECT_THAT(ParseError({{"HIXL_BARRIER_SPIN_US", "-1"}}), HasSubstr("HIXL_BARRIER_SPIN_US"));
  EXPECT_THAT(ParseError({{"HIXL_BARRIER_SPIN_US", "1ms"}}), HasSubstr("HIXL_BARRIER_SPIN_US"));
  EXPECT_THAT(ParseError({{"HIXL_BARRIER_SPIN_US", "2000000"}}), HasSubstr("out of range"));
}

TEST(EnvTest, EverythingAtOnce) {
  Config c = ParseOk({{"SLURM_PROCID", "2"},
                      {"SLURM_NTASKS", "3"},
                      {"SLURM_LOCALID", "0"},
                      {"MASTER_ADDR", "10.1.2.3"},
                      {"MASTER_PORT", "29400"},
                      {"HIXL_TIMEOUT_MS", "123"},
                      {"HIXL_TRANSPORT", "shm"},
                      {"HIXL_SHM_CMA", "0"},
                      {"HIXL_NET_DEV", "eth1"},
                      {"HIXL_LOG_LEVEL", "debug"}});
  EXPECT_EQ(c.rank, 2);
  EXPECT_EQ(c.world_size, 3);
  EXPECT_EQ(c.local_rank, 0);
  EXPECT_EQ(c.master_addr, "10.1.2.3");
  EXPECT_EQ(c.master_port, 29400);
  EXPECT_EQ(c.timeout_ms, 123);
  EXPECT_EQ(c.transport, "shm");
  EXPECT_EQ(c.net_dev, "eth1");
  EXPECT_EQ(c.log_level, "debug");
}

}  // namespace
}  // namespace hixl::bootstrap
