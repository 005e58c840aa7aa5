// hixl_perf --engine: batch bandwidth of the engine API (hixl::Engine).
#pragma once

#include <hixl/hixl.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "bench_common.h"

struct EngineBatchOptions {
  std::vector<uint64_t> block_sizes;            // bytes per block
  uint64_t batch_bytes = 64 * hixl_bench::kMi;  // bytes per batch (blocks = batch_bytes / block)
  int reps = 5;
  std::string transport = "auto";  // the engines' "transport" option
};

// Rank 1's engine writes and reads batches of scattered blocks into rank 0's
// engine-registered memory (TransferSync, median of `reps` batches, data
// verified after each); in the same run, the same blocks as world puts/gets
// (registered memory, one fence per batch) and one core's memcpy of the same
// blocks.  Prints a table on rank 1 and returns the rows (rank 1; empty
// elsewhere).  Ranks other than 0 and 1 only take part in the barriers.
// Sets *ok to false on a failure or a verification mismatch.
hixl_bench::json RunEngineBatch(hixl::World& world, const EngineBatchOptions& options, bool* ok);
