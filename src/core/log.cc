#include "core/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <memory>

namespace hixl::log {

spdlog::logger& Get() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>("hixl", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[hixl] %l: %v");
    l->set_level(spdlog::level::warn);
    return l;
  }();
  return *logger;
}

void Configure(const std::string& level, int rank) {
  Get().set_level(spdlog::level::from_str(level));
  Get().set_pattern(fmt::format("[hixl rank {}] %l: %v", rank));
}

}  // namespace hixl::log
