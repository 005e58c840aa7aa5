#include "base/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace hixl::log {

spdlog::logger& Get() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("hixl", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[hixl] %l: %v");
    // HIXL_LOG_LEVEL from the start (a world re-reads it in Configure;
    // engines and everything before init use this).
    const char* v = std::getenv("HIXL_LOG_LEVEL");
    const std::string lv = v ? v : "";
    const bool known = lv == "error" || lv == "warn" || lv == "info" || lv == "debug" || lv == "trace";
    l->set_level(known ? spdlog::level::from_str(lv) : spdlog::level::warn);
    return l;
  }();
  return *logger;
}

void Configure(const std::string& level, int rank) {
  Get().set_level(spdlog::level::from_str(level));
  Get().set_pattern(fmt::format("[hixl rank {}] %l: %v", rank));
}

}  // namespace hixl::log
