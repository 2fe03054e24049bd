#include "scheduler/app/report_html.hpp"

#include "kernels/error.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gradwire::scheduler {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  check(static_cast<bool>(in), "cannot read " + path);
  auto j = json::parse(in, nullptr, false);
  check(!j.is_discarded(), path + ": not valid JSON");
  return j;
}

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s)
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default: out += c;
    }
  return out;
}

/// A JSON value as a table cell.
std::string shown(const json& v) {
  if (v.is_null())
    return "n/a";
  if (v.is_string())
    return v.get<std::string>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    return std::fabs(d) >= 1000 ? fmt::format("{:.0f}", d) : fmt::format("{:.4g}", d);
  }
  return v.dump();
}

std::string table(const std::vector<std::string>& head, const std::vector<std::vector<std::string>>& rows) {
  std::string h = "<div class=\"wide\"><table><thead><tr>";
  for (const auto& c : head)
    h += "<th>" + esc(c) + "</th>";
  h += "</tr></thead><tbody>\n";
  for (const auto& r : rows) {
    h += "<tr>";
    for (const auto& c : r)
      h += "<td>" + esc(c) + "</td>";
    h += "</tr>\n";
  }
  return h + "</tbody></table></div>\n";
}

namespace {

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    const unsigned v = static_cast<unsigned char>(in[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

const char* style_css = R"(body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{font-size:1.5em}.wide{overflow-x:auto}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em;margin:.5em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.note{background:#fff6d6;padding:.6em;border:1px solid #e8d48a}
figure{display:inline-block;margin:.4em;vertical-align:top;width:530px}figure img{width:100%}figcaption{font-size:.85em;color:#444}.meta{color:#666})";

} // namespace

std::string page(const std::string& title, const std::string& body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + esc(title) + "</title><style>" +
         style_css + "</style></head><body>\n<h1>" + esc(title) + "</h1>\n" + body +
         // Marks how many plots the browser decoded (a test reads it back from headless Chromium).
         "<script>addEventListener('load',()=>{const i=[...document.images];document.body.dataset.plotsRendered="
         "i.filter(x=>x.complete&&x.naturalWidth>0).length+'/'+i.length;});</script>\n</body></html>\n";
}

std::string figures(const plot_outcome& po, const std::vector<plot_spec>& specs) {
  if (po.files.empty())
    return "<p class=\"note\" id=\"no-plots\">" + esc(po.problem) + "</p>\n";
  std::string h;
  for (const auto& f : po.files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const auto name = fs::path(f).stem().string();
    std::string caption = name;
    for (const auto& s : specs)
      if (s.name == name)
        caption = s.title;
    h += "<figure class=\"plot\"><img alt=\"" + esc(caption) + "\" src=\"data:image/svg+xml;base64," + base64(ss.str()) +
         "\"><figcaption>" + esc(caption) + " (<a href=\"plots/" + esc(name) + ".svg\">svg</a>)</figcaption></figure>\n";
  }
  return h;
}

} // namespace gradwire::scheduler
