// Parameter-server training loop over hixl's one-sided put/get, in C++:
// rank 0 is the server, every other rank a worker, and the model is one flat
// float32 buffer (the seed's 100 M parameters, 400 MB, by default).
//
// Each worker registers its parameter buffer and its gradient buffer (with
// the loss at the end); every rank allocates the same block of symmetric
// memory for signal words: word 0 on a worker is "the parameters for step s
// have arrived", word w on the server "worker w's gradient of step s is
// ready".  No barrier per step; one step s:
//   workers  WaitUntil(word 0 >= s): the server's put has landed; compute
//            their gradient into their gradient buffer; AtomicSet(word w on
//            the server, s)
//   server   for every worker: WaitUntil(word w >= s), then Get its gradient
//            (the worker takes no part); average, take an SGD step, and
//            PutSignal the new parameters into every worker's parameter
//            buffer with word 0 set to s + 1: whoever sees the signal sees
//            the parameters
//
// The objective is deliberately simple so that the run is about moving the
// buffers and can check its own result: worker k holds targets t_k (a
// deterministic pattern of its own) and its loss is 0.5 * |w - t_k|^2, so
// its gradient is w - t_k and the average over workers is minimised by the
// mean of the targets, which the server checks at the end.
//
//   hixlrun -n 4 build/examples/ps_train                      # 1 server + 3 workers, 100M parameters
//   hixlrun -n 2 build/examples/ps_train --params 1M --steps 20
#include <hixl/hixl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// "100M" -> 100000000, "1.5k" -> 1500, "4096" -> 4096; 0 if malformed.
uint64_t ParseCount(const std::string& s) {
  if (s.empty()) return 0;
  double scale = 1;
  std::string num = s;
  switch (s.back()) {
    case 'k': case 'K': scale = 1e3; num.pop_back(); break;
    case 'm': case 'M': scale = 1e6; num.pop_back(); break;
    case 'g': case 'G': scale = 1e9; num.pop_back(); break;
    default: break;
  }
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (!end || *end != '\0' || v <= 0) return 0;
  return static_cast<uint64_t>(v * scale);
}

std::string Bytes(double n) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (n >= 1000 && u < 4) {
    n /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", n, units[u]);
  return buf;
}

// Worker k's target for parameter i: a cheap deterministic pattern in [-0.5, 0.5).
inline float Target(int k, uint64_t i) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(k) * 40503u;
  h ^= h >> 15;
  return static_cast<float>(h & 1023u) / 1024.0f - 0.5f;
}

struct Addrs {
  uint64_t params;
  uint64_t grads;
};

#define CHECK_OK(expr)                                                                   \
  do {                                                                                   \
    hixl::Status s_ = (expr);                                                            \
    if (!s_.ok()) {                                                                      \
      std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, #expr, s_.ToString().c_str()); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

int Usage() {
  std::fprintf(stderr,
               "usage: ps_train [--params N (default 100M)] [--steps S (default 10)] [--lr LR (default 0.5)]\n"
               "  run under hixlrun with 2 or more ranks: rank 0 serves, the others work\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t n_params = 100'000'000;
  int steps = 10;
  float lr = 0.5f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--params" && i + 1 < argc) {
      n_params = ParseCount(argv[++i]);
      if (n_params == 0) return Usage();
    } else if (a == "--steps" && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
      if (steps <= 0) return Usage();
    } else if (a == "--lr" && i + 1 < argc) {
      lr = std::strtof(argv[++i], nullptr);
      if (!(lr > 0 && lr <= 1)) return Usage();
    } else {
      return Usage();
    }
  }

  auto world = hixl::World::Init();
  if (!world) {
    std::fprintf(stderr, "init failed: %s\n", world.status().ToString().c_str());
    return 1;
  }
  const int rank = world->rank(), size = world->size();
  if (size < 2) {
    std::fprintf(stderr, "ps_train needs a server and at least one worker: hixlrun -n 2 (or more) ...\n");
    (void)world->Finalize();
    return 2;
  }
  const int n_workers = size - 1;
  const size_t P = n_params;
  const size_t param_bytes = P * sizeof(float), grad_bytes = (P + 2) * sizeof(float);

  std::vector<float> params(P, 0.0f);  // every rank's copy of the parameters
  int rc = 0;

  // The signal words, in symmetric memory: the same address on every rank.
  auto sig_block = world->Alloc(8 * static_cast<size_t>(size));
  if (!sig_block) CHECK_OK(sig_block.status());
  auto* words = static_cast<uint64_t*>(*sig_block);
  std::memset(words, 0, 8 * static_cast<size_t>(size));  // before the Allgather below, so before any signal
  const uint64_t sig_addr = reinterpret_cast<uint64_t>(words);

  if (rank == 0) {
    // ---------------------------------------------------------------- server
    std::printf("[server] %d worker(s), %zu parameters (%s of float32), %d steps, lr %.2f\n", n_workers, P,
                Bytes(static_cast<double>(param_bytes)).c_str(), steps, static_cast<double>(lr));
    std::fflush(stdout);
    Addrs none{0, 0};
    auto addrs = world->Allgather(none);
    if (!addrs) CHECK_OK(addrs.status());
    std::vector<float> recv((P + 2) * static_cast<size_t>(n_workers));  // [gradient..., loss, unused] per worker

    // A memcpy of one buffer, for comparison.
    auto t = Clock::now();
    std::memcpy(recv.data(), params.data(), param_bytes);
    const double memcpy_rate = static_cast<double>(param_bytes) / Seconds(t);

    // The initial parameters: "the parameters for step 1".
    t = Clock::now();
    for (int w = 1; w < size; ++w) {
      CHECK_OK(world->PutSignal(w, params.data(), (*addrs)[w].params, param_bytes, sig_addr, 1, hixl::SignalOp::kSet));
    }
    CHECK_OK(world->Fence());
    const double first_put_s = Seconds(t);  // counted in the put rate, not in the per-step times

    double get_s = 0, put_s = first_put_s, update_s = 0, first_loss = 0, loss = 0;
    uint64_t get_bytes = 0, put_bytes = param_bytes * static_cast<uint64_t>(n_workers), ops = n_workers;
    const auto start = Clock::now();
    for (int step = 1; step <= steps; ++step) {
      double g = 0;
      for (int w = 1; w < size; ++w) {
        // Worker w's gradient of this step is ready once it set word w to `step`.
        CHECK_OK(world->WaitUntil(&words[w], hixl::Cmp::kGe, static_cast<uint64_t>(step)));
        t = Clock::now();
        CHECK_OK(world->Get(w, (*addrs)[w].grads, recv.data() + (P + 2) * static_cast<size_t>(w - 1), grad_bytes));
        g += Seconds(t);
      }
      t = Clock::now();
      CHECK_OK(world->Fence());
      g += Seconds(t);
      get_s += g;
      get_bytes += grad_bytes * static_cast<uint64_t>(n_workers);

      t = Clock::now();
      loss = 0;
      const float scale = lr / static_cast<float>(n_workers);
      for (int w = 0; w < n_workers; ++w) {
        const float* grad = recv.data() + (P + 2) * static_cast<size_t>(w);
        loss += grad[P] / n_workers;
        for (size_t i = 0; i < P; ++i) params[i] -= scale * grad[i];
      }
      update_s += Seconds(t);
      if (step == 1) first_loss = loss;

      // The new parameters, with word 0 on each worker set to step + 1; the
      // fence completes the puts before the next step changes `params`.
      t = Clock::now();
      for (int w = 1; w < size; ++w) {
        CHECK_OK(world->PutSignal(w, params.data(), (*addrs)[w].params, param_bytes, sig_addr,
                                  static_cast<uint64_t>(step) + 1, hixl::SignalOp::kSet));
      }
      CHECK_OK(world->Fence());
      const double p = Seconds(t);
      put_s += p;
      put_bytes += param_bytes * static_cast<uint64_t>(n_workers);
      ops += 2 * static_cast<uint64_t>(n_workers);
      std::printf("[server] step %3d/%d  loss %.4g  get %s at %s/s, put %s at %s/s\n", step, steps, loss,
                  Bytes(static_cast<double>(grad_bytes) * n_workers).c_str(),
                  Bytes(static_cast<double>(grad_bytes) * n_workers / g).c_str(),
                  Bytes(static_cast<double>(param_bytes) * n_workers).c_str(),
                  Bytes(static_cast<double>(param_bytes) * n_workers / p).c_str());
      std::fflush(stdout);
    }
    const double wall = Seconds(start);

    // The optimum is the mean of the workers' targets; SGD with lr closes
    // (1 - lr) of the distance per step.
    double max_err = 0, best_loss = 0;
    for (size_t i = 0; i < P; ++i) {
      double mean = 0;
      for (int k = 1; k < size; ++k) mean += Target(k, i);
      mean /= n_workers;
      max_err = std::max(max_err, std::fabs(params[i] - mean));
      for (int k = 1; k < size; ++k) best_loss += 0.5 * (mean - Target(k, i)) * (mean - Target(k, i));
    }
    best_loss /= static_cast<double>(P) * n_workers;
    const double expected = 0.5 * std::pow(1.0 - static_cast<double>(lr), steps) + 1e-4;
    std::printf("[server] loss %.4g -> %.4g (the optimum's: %.4g); largest distance to the optimum %.2e "
                "(expected below %.2e)\n", first_loss, loss, best_loss, max_err, expected);
    std::printf("[server] moved %s in %llu one-sided transfers: get %s at %s/s, put %s at %s/s "
                "(memcpy of one buffer: %s/s)\n",
                Bytes(static_cast<double>(get_bytes + put_bytes)).c_str(), static_cast<unsigned long long>(ops),
                Bytes(static_cast<double>(get_bytes)).c_str(), Bytes(get_bytes / get_s).c_str(),
                Bytes(static_cast<double>(put_bytes)).c_str(), Bytes(put_bytes / put_s).c_str(),
                Bytes(memcpy_rate).c_str());
    std::printf("[server] %d steps in %.2f s (%.1f ms/step: %.1f ms transfers, %.1f ms update)\n", steps, wall,
                1000 * wall / steps, 1000 * (get_s + put_s - first_put_s) / steps, 1000 * update_s / steps);
    if (!(max_err <= expected) || !(loss < first_loss)) {
      std::fprintf(stderr, "[server] FAILED: the parameters did not converge\n");
      rc = 1;
    }
  } else {
    // ---------------------------------------------------------------- worker
    std::vector<float> grads(P + 2, 0.0f);  // [gradient..., loss, unused]
    auto reg_params = hixl::Registration::Make(params.data(), param_bytes);
    if (!reg_params) CHECK_OK(reg_params.status());
    auto reg_grads = hixl::Registration::Make(grads.data(), grad_bytes);
    if (!reg_grads) CHECK_OK(reg_grads.status());
    Addrs mine{reinterpret_cast<uint64_t>(params.data()), reinterpret_cast<uint64_t>(grads.data())};
    auto addrs = world->Allgather(mine);
    if (!addrs) CHECK_OK(addrs.status());
    for (int step = 1; step <= steps; ++step) {
      // Sleeps until the server's PutSignal of this step's parameters has landed.
      CHECK_OK(world->WaitUntil(&words[0], hixl::Cmp::kGe, static_cast<uint64_t>(step)));
      double loss = 0;
      for (size_t i = 0; i < P; ++i) {
        const float d = params[i] - Target(rank, i);
        grads[i] = d;
        loss += 0.5 * static_cast<double>(d) * d;
      }
      grads[P] = static_cast<float>(loss / static_cast<double>(P));  // per parameter, for reading
      // Gradient ready: the server gets it before it puts the next
      // parameters, so `grads` is not overwritten before it was read.
      CHECK_OK(world->AtomicSet(0, sig_addr + 8 * static_cast<uint64_t>(rank), static_cast<uint64_t>(step)));
    }
    // The final parameters must land before `params` is deregistered.
    CHECK_OK(world->WaitUntil(&words[0], hixl::Cmp::kGe, static_cast<uint64_t>(steps) + 1));
  }
  CHECK_OK(world->Barrier());  // every signal has landed: the words may go
  CHECK_OK(world->Free(words));
  CHECK_OK(world->Finalize());
  return rc;
}
