// hixl's own logger (to stderr, "[hixl rank N] ..."), level from
// HIXL_LOG_LEVEL.  It is not registered in spdlog's global registry, so an
// application's own spdlog set-up is left alone.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hixl::log {

spdlog::logger& Get();
// Sets the level ("error", "warn", "info", "debug", "trace") and the rank shown.
void Configure(const std::string& level, int rank);

}  // namespace hixl::log

#define HIXL_LOG_ERROR(...) ::hixl::log::Get().error(__VA_ARGS__)
#define HIXL_LOG_WARN(...) ::hixl::log::Get().warn(__VA_ARGS__)
#define HIXL_LOG_INFO(...) ::hixl::log::Get().info(__VA_ARGS__)
#define HIXL_LOG_DEBUG(...) ::hixl::log::Get().debug(__VA_ARGS__)
