// mpi_pingpong: the two-sided MPI reference for hixl_perf (MPI_Send/MPI_Recv
// between rank 0 and rank 1), with hixl_perf's sizes, protocol and JSON.
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/mpi_pingpong --output mpi.json
//
// For every size:
//   * latency: ping-pong, rank 0 sends N bytes and rank 1 sends them back;
//     half the round trip (as osu_latency);
//   * bandwidth and message rate: rank 0 sends a batch of N-byte messages,
//     rank 1 receives them and answers with one empty message; bytes over
//     the batch's time on rank 0.  Messages up to 64 KiB go out in windows
//     of 64 (MPI_Isend/MPI_Irecv, as osu_bw), larger ones one at a time.
// The median over --reps batches, after warm-up; the received data of every
// batch is verified (exit status 1 on a mismatch).
#include <mpi.h>

#include "bench_common.h"

namespace {

using namespace hixl_bench;  // NOLINT(build/namespaces): the benchmark's own helpers

constexpr uint64_t kWindow = 64;
constexpr uint64_t kWindowMax = 64 * kKi;  // larger messages are sent one at a time
constexpr int kTagData = 1, kTagAck = 2;

struct Options {
  SizeOptions sizes;
  int reps = 5;
  int warmup = 2;
  double batch_ms = 10;
  uint64_t max_iters = 1000000;
  std::string rate_max = "4K";
  std::string output;
};

class PingPong {
 public:
  PingPong(Options opt, int rank) : opt_(std::move(opt)), me_(rank) {}
  int Run();

 private:
  using Batch = std::function<void(uint64_t)>;

  void Send(const uint8_t* p, uint64_t n, int to, int tag) {
    MPI_Send(p, static_cast<int>(n), MPI_BYTE, to, tag, MPI_COMM_WORLD);
  }
  void Recv(uint8_t* p, uint64_t n, int from, int tag) {
    MPI_Recv(p, static_cast<int>(n), MPI_BYTE, from, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }

  // Rank 0 calibrates; rank 1 follows the count it is told.
  uint64_t AgreedIters(const Batch& batch) {
    uint64_t iters = 0;
    if (me_ == 0) {
      // Rank 0 tells rank 1 each probe's length before running it; 0 ends.
      const Batch announced = [&](uint64_t k) {
        MPI_Send(&k, 1, MPI_UINT64_T, 1, kTagAck, MPI_COMM_WORLD);
        batch(k);
      };
      iters = Calibrate(announced, opt_.warmup, opt_.batch_ms / 1000, opt_.max_iters);
      uint64_t done = 0;
      MPI_Send(&done, 1, MPI_UINT64_T, 1, kTagAck, MPI_COMM_WORLD);
    } else {
      for (uint64_t k;;) {
        MPI_Recv(&k, 1, MPI_UINT64_T, 0, kTagAck, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (k == 0) break;
        batch(k);
      }
    }
    MPI_Bcast(&iters, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    return iters;
  }

  bool MeasureSize(uint64_t size, json* out);

  Options opt_;
  const int me_;
  uint64_t batch_no_ = 0;
};

bool PingPong::MeasureSize(uint64_t size, json* out) {
  const uint64_t window = size <= kWindowMax ? kWindow : 1;
  // Rank 0 sends from `src`; rank 1 receives into `window` distinct buffers
  // (concurrent receives must not share memory) and echoes the first.
  Buffer src = AllocBuffer(size);
  Buffer dst = AllocBuffer(RoundUp(size, 64) * window);
  const uint64_t stride = RoundUp(size, 64);
  uint8_t ack = 0;

  const Batch latency = [&](uint64_t k) {
    for (uint64_t i = 0; i < k; ++i) {
      if (me_ == 0) {
        Send(src.get(), size, 1, kTagData);
        Recv(dst.get(), size, 1, kTagData);
      } else {
        Recv(dst.get(), size, 0, kTagData);
        Send(dst.get(), size, 0, kTagData);
      }
    }
  };
  const Batch bandwidth = [&](uint64_t k) {
    std::vector<MPI_Request> reqs(window);
    for (uint64_t done = 0; done < k;) {
      const uint64_t w = std::min(window, k - done);
      for (uint64_t j = 0; j < w; ++j) {
        if (me_ == 0) {
          MPI_Isend(src.get(), static_cast<int>(size), MPI_BYTE, 1, kTagData, MPI_COMM_WORLD, &reqs[j]);
        } else {
          MPI_Irecv(dst.get() + j * stride, static_cast<int>(size), MPI_BYTE, 0, kTagData, MPI_COMM_WORLD, &reqs[j]);
        }
      }
      MPI_Waitall(static_cast<int>(w), reqs.data(), MPI_STATUSES_IGNORE);
      done += w;
    }
    if (me_ == 0)
      Recv(&ack, 0, 1, kTagAck);
    else
      Send(&ack, 0, 0, kTagAck);
  };

  std::vector<double> lat, bw, rate;
  uint64_t iters_lat = 0, iters_bw = 0;
  auto measure = [&](const Batch& batch, bool is_latency) {
    const uint64_t iters = AgreedIters(batch);
    (is_latency ? iters_lat : iters_bw) = iters;
    for (int r = 0; r < opt_.reps; ++r) {
      const uint64_t seed = Seed(batch_no_++, 0);
      if (me_ == 0) Fill(src.get(), size, seed);
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      batch(iters);
      const double t = std::max(Seconds(t0), 1e-9);
      // What arrived: on rank 1 the last message (every buffer of the last
      // window); for latency also what came back to rank 0.
      int ok = 1;
      const uint64_t filled = is_latency ? 1 : std::min(window, iters);
      if (me_ == 1) {
        for (uint64_t j = 0; j < filled; ++j) ok &= !Check(dst.get() + j * stride, size, seed).has_value();
      } else if (is_latency) {
        ok = !Check(dst.get(), size, seed).has_value();
      }
      int all_ok = 0;
      MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
      if (!all_ok) {
        if (me_ == 0) std::fprintf(stderr, "mpi_pingpong: VERIFICATION FAILED at %s\n", SizeName(size).c_str());
        return false;
      }
      if (is_latency) {
        lat.push_back(t / static_cast<double>(iters) / 2 * 1e6);
      } else {
        bw.push_back(static_cast<double>(iters) * static_cast<double>(size) / t / 1e9);
        rate.push_back(static_cast<double>(iters) / t / 1e6);
      }
    }
    return true;
  };
  if (!measure(latency, true) || !measure(bandwidth, false)) return false;
  if (me_ == 0) {
    Stats l = Summarize(lat), b = Summarize(bw);
    json j = {{"op", "sendrecv"},     {"size", size},     {"size_name", SizeName(size)}, {"iters_lat", iters_lat},
              {"iters_bw", iters_bw}, {"window", window}, {"lat_us", ToJson(l)},         {"bw_GBps", ToJson(b)}};
    if (size <= *ParseSize(opt_.rate_max)) j["msg_rate_Mops"] = ToJson(Summarize(rate));
    std::printf("%8s   %-26s %-27s\n", SizeName(size).c_str(), Spread(l).c_str(), Spread(b).c_str());
    std::fflush(stdout);
    out->push_back(std::move(j));
  }
  return true;
}

int PingPong::Run() {
  std::string err;
  auto sizes = opt_.sizes.Resolve(&err);
  if (!sizes || !ParseSize(opt_.rate_max)) {
    if (me_ == 0) std::fprintf(stderr, "mpi_pingpong: %s\n", sizes ? "bad --rate-max" : err.c_str());
    return 2;
  }
  for (uint64_t s : *sizes) {
    if (s > static_cast<uint64_t>(INT32_MAX)) {
      if (me_ == 0) std::fprintf(stderr, "mpi_pingpong: %s is more than an MPI count holds\n", SizeName(s).c_str());
      return 2;
    }
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string lib(version, static_cast<size_t>(len));
  lib = lib.substr(0, lib.find_first_of(",\n"));
  const auto started = Clock::now();
  const std::vector<double> load_at_start = LoadAverage();
  if (me_ == 0) {
    std::printf("mpi_pingpong: %s, MPI_Send/MPI_Recv rank 0 -> rank 1; %s\n", lib.c_str(), CpuModel().c_str());
    std::printf("lat = half a ping-pong; GB/s = a batch of sends + one empty reply; median [min - max] of %d\n",
                opt_.reps);
    std::printf("    size   lat us                     GB/s\n");
  }
  json results = json::array();
  for (uint64_t s : *sizes) {
    if (!MeasureSize(s, &results)) return 1;
  }
  if (me_ == 0 && !opt_.output.empty()) {
    json doc;
    doc["tool"] = "mpi_pingpong";
    doc["reference"] = "mpi";
    doc["label"] = "MPI_Send/MPI_Recv (" + lib + ")";
    doc["started"] = NowIso();
    doc["elapsed_s"] = Seconds(started);
    doc["machine"] = Machine();
    doc["machine"]["loadavg_at_start"] = load_at_start;
    doc["config"] = {{"sizes", *sizes}, {"reps", opt_.reps}, {"warmup", opt_.warmup}, {"batch_ms", opt_.batch_ms}};
    doc["results"] = results;
    doc["verified"] = true;
    if (!WriteJson(opt_.output, doc)) return 1;
    std::printf("wrote %s\n", opt_.output.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options opt;
  CLI::App app{
      "mpi_pingpong: the two-sided MPI reference of hixl_perf.\n"
      "  mpirun --allow-run-as-root --oversubscribe -np 2 mpi_pingpong --output mpi.json"};
  opt.sizes.AddTo(app);
  app.add_option("--reps", opt.reps, "Timed batches per figure")->check(CLI::Range(1, 1000))->capture_default_str();
  app.add_option("--warmup", opt.warmup, "Warm-up messages before each figure")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--batch-ms", opt.batch_ms, "Target length of one timed batch")
      ->check(CLI::Range(0.01, 100000.0))
      ->capture_default_str();
  app.add_option("--max-iters", opt.max_iters, "Most messages in one batch")->capture_default_str();
  app.add_option("--rate-max", opt.rate_max, "Report the message rate up to this size")->capture_default_str();
  app.add_option("--output,-o", opt.output, "Write the results as JSON to FILE");
  int rc = 0;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    rc = rank == 0 ? app.exit(e) : (e.get_exit_code() == 0 ? 0 : 2);
    MPI_Finalize();
    return rc;
  }
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "mpi_pingpong: run it with exactly 2 ranks (mpirun -np 2)\n");
    MPI_Finalize();
    return 2;
  }
  rc = PingPong(std::move(opt), rank).Run();
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}
