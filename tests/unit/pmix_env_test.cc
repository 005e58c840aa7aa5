// Launch by a PMIx server (mpirun, oshrun, srun --mpi=pmix) without
// MASTER_ADDR/MASTER_PORT: the configuration asks for a PMIx rendezvous;
// without PMIx the error stays the clear one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "bootstrap/env.h"
#include "bootstrap/pmix.h"

namespace hixl::bootstrap {
namespace {

using ::testing::HasSubstr;

GetEnv Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const std::map<std::string, std::string> kMpirun = {{"OMPI_COMM_WORLD_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_SIZE", "3"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                    {"PMIX_NAMESPACE", "1958477825"},
                                                    {"PMIX_RANK", "1"}};

TEST(PmixEnv, UnderPmixNeedsNamespaceAndRank) {
  EXPECT_TRUE(UnderPmix(Env(kMpirun)));
  EXPECT_FALSE(UnderPmix(Env({{"PMIX_RANK", "1"}})));
  EXPECT_FALSE(UnderPmix(Env({{"PMIX_NAMESPACE", "x"}})));
  EXPECT_FALSE(UnderPmix(Env({})));
}

TEST(PmixEnv, MpirunWithoutMasterPortRendezvousesThroughPmix) {
  auto c = ParseConfig(Env(kMpirun));
  if (!PmixBuiltIn()) {
    ASSERT_FALSE(c.ok());
    EXPECT_THAT(c.status().message(), HasSubstr("no PMIx support"));
    EXPECT_THAT(c.status().message(), HasSubstr("MASTER_PORT is not set"));
    return;
  }
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c.value().pmix_rendezvous);
  EXPECT_EQ(c.value().rank, 1);
  EXPECT_EQ(c.value().world_size, 3);
  EXPECT_FALSE(c.value().master_addr_set);
}

TEST(PmixEnv, MasterPortStillWinsUnderPmix) {
  auto vars = kMpirun;
  vars["MASTER_PORT"] = "29500";
  vars["MASTER_ADDR"] = "10.1.2.3";
  auto c = ParseConfig(Env(vars));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c.value().pmix_rendezvous);
  EXPECT_EQ(c.value().master_port, 29500);
  EXPECT_TRUE(c.value().master_addr_set);
}

TEST(PmixEnv, WithoutPmixOrMasterPortTheErrorIsClear) {
  auto c = ParseConfig(Env({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}}));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Errc::kBootstrap);
  EXPECT_THAT(c.status().message(), HasSubstr("MASTER_PORT is not set"));
  EXPECT_THAT(c.status().message(), HasSubstr("Open MPI"));
}

TEST(PmixEnv, WorldOfOneNeedsNoRendezvous) {
  auto c = ParseConfig(Env({{"PMIX_NAMESPACE", "x"}, {"PMIX_RANK", "0"}}));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().world_size, 1);
  EXPECT_FALSE(c.value().pmix_rendezvous);
}

}  // namespace
}  // namespace hixl::bootstrap
