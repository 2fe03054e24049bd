#pragma once
/// @file report_html.hpp
/// The pieces of gradwire's HTML pages (report.html of a run or sweep,
/// gradwire compare's page): escaping, tables, embedded plots, the page.

#include "scheduler/app/plot.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace gradwire::scheduler {

/// A JSON file; throws gradwire::error naming it when unreadable or invalid.
nlohmann::json read_json(const std::string& path);
/// Text escaped for HTML.
std::string esc(const std::string& s);
/// A JSON value as a table cell ("n/a" for null).
std::string shown(const nlohmann::json& v);
/// An HTML table.
std::string table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows);
/// A whole page: title, the style, the body.
std::string page(const std::string& title, const std::string& body);
/// The drawn plots, embedded (SVG as data: URLs) with their captions, or
/// the note saying why there are none.
std::string figures(const plot_outcome& po, const std::vector<plot_spec>& specs);

} // namespace gradwire::scheduler
