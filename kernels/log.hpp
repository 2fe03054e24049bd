#pragma once
/// @file log.hpp
/// The project's log: every layer reports through it, never by printing.
/// A line reads "gradwire: [level: ]message" on standard error; messages
/// name their rank, shard or peer themselves ("rank 2: ...") because one
/// process may hold several nodes (tests, virtual time). Lines below the
/// level are dropped: info by default, GRADWIRE_LOG_LEVEL at start-up, or
/// `gradwire run --log-level`.

#include <fmt/format.h>

#include <optional>
#include <string_view>
#include <utility>

namespace gradwire::log {

enum class level : int { debug, info, warn, error, off };

void set_level(level l);
level get_level();
inline bool enabled(level l) { return l >= get_level() && l != level::off; }
/// "debug", "info", "warn", "error" or "off"; nullopt for anything else.
std::optional<level> parse_level(std::string_view text);
/// Writes one line at `l` (the caller checked enabled(l)).
void write(level l, std::string_view text);

template <typename... A>
void at(level l, fmt::format_string<A...> f, A&&... a) {
  if (enabled(l))
    write(l, fmt::format(f, std::forward<A>(a)...));
}
template <typename... A>
void debug(fmt::format_string<A...> f, A&&... a) { at(level::debug, f, std::forward<A>(a)...); }
template <typename... A>
void info(fmt::format_string<A...> f, A&&... a) { at(level::info, f, std::forward<A>(a)...); }
template <typename... A>
void warn(fmt::format_string<A...> f, A&&... a) { at(level::warn, f, std::forward<A>(a)...); }
template <typename... A>
void error(fmt::format_string<A...> f, A&&... a) { at(level::error, f, std::forward<A>(a)...); }

} // namespace gradwire::log
