#include "actors/snapshot.hpp"

#include "kernels/error.hpp"

#include <sstream>

namespace gradwire::actors {
namespace {

// meta: "gwsnap 1\nwho <text>\nstep <n>\nf <name> <count>\n...i <name> <count> <v>...\n"
constexpr const char* magic = "gwsnap";
constexpr int format = 1;
constexpr std::size_t max_sections = 4096;
constexpr std::size_t max_ints = std::size_t{1} << 20; // clocks, counters, a staleness histogram

bool good_name(const std::string& s) {
  if (s.empty() || s.size() > 64)
    return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  return true;
}

} // namespace

const std::vector<float>& snapshot::f(const std::string& name) const {
  for (const auto& [n, v] : floats)
    if (n == name)
      return v;
  throw error(who + ": the checkpoint part has no '" + name + "'");
}

const std::vector<std::int64_t>& snapshot::i(const std::string& name) const {
  for (const auto& [n, v] : ints)
    if (n == name)
      return v;
  throw error(who + ": the checkpoint part has no '" + name + "'");
}

std::int64_t snapshot::one(const std::string& name) const {
  const auto& v = i(name);
  check(v.size() == 1, who + ": '" + name + "' holds " + std::to_string(v.size()) + " values, expected 1");
  return v[0];
}

bool snapshot::has(const std::string& name) const {
  for (const auto& s : floats)
    if (s.first == name)
      return true;
  for (const auto& s : ints)
    if (s.first == name)
      return true;
  return false;
}

std::string snapshot::meta() const {
  std::vector<std::pair<std::string, std::size_t>> sizes;
  for (const auto& [n, v] : floats)
    sizes.emplace_back(n, v.size());
  return meta_for(sizes);
}

std::string snapshot::meta_for(const std::vector<std::pair<std::string, std::size_t>>& sizes) const {
  std::ostringstream o;
  o << magic << ' ' << format << "\nwho " << who << "\nstep " << step << '\n';
  for (const auto& [n, c] : sizes)
    o << "f " << n << ' ' << c << '\n';
  for (const auto& [n, v] : ints) {
    o << "i " << n << ' ' << v.size();
    for (auto x : v)
      o << ' ' << x;
    o << '\n';
  }
  return o.str();
}

std::vector<float> snapshot::packed() const {
  std::size_t n = 0;
  for (const auto& s : floats)
    n += s.second.size();
  std::vector<float> out;
  out.reserve(n);
  for (const auto& s : floats)
    out.insert(out.end(), s.second.begin(), s.second.end());
  return out;
}

snapshot snapshot::layout(const std::string& meta, std::size_t n, const std::string& where) {
  return from_parts(meta, nullptr, n, where);
}

snapshot_frame snapshot_frame::checked(std::string meta, slice floats, const std::string& where) {
  const auto n = floats.defined() ? static_cast<std::size_t>(floats.numel()) : 0;
  const auto s = snapshot::layout(meta, n, where);
  return {s.who, s.step, std::move(meta), std::move(floats)};
}

snapshot_frame snapshot_frame::of(const snapshot& s) {
  auto f = s.packed();
  return {s.who, s.step, s.meta(), f.empty() ? slice{} : slice::from(f, {static_cast<std::int64_t>(f.size())})};
}

snapshot snapshot_frame::unpack(const std::string& where) const {
  return snapshot::from_parts(meta, floats.defined() ? floats.data() : nullptr, float_count(), where);
}

snapshot snapshot::from_parts(const std::string& meta, const float* data, std::size_t n, const std::string& where) {
  auto bad = [&](const std::string& what) { return error(where + ": " + what); };
  std::istringstream in(meta);
  std::string word;
  int fmt = 0;
  if (!(in >> word >> fmt) || word != magic)
    throw bad("not a gradwire checkpoint part (no '" + std::string(magic) + "' header)");
  if (fmt != format)
    throw bad("checkpoint part format " + std::to_string(fmt) + ", this build reads " + std::to_string(format));
  snapshot s;
  if (!(in >> word) || word != "who")
    throw bad("checkpoint part without 'who'");
  in.get();
  std::getline(in, s.who);
  if (s.who.empty() || s.who.size() > 64)
    throw bad("checkpoint part with a bad 'who'");
  if (!(in >> word >> s.step) || word != "step" || s.step < 0)
    throw bad("checkpoint part without a valid 'step'");
  std::size_t used = 0;
  while (in >> word) {
    std::string name;
    long long count = -1;
    if ((word != "f" && word != "i") || !(in >> name >> count) || !good_name(name) || count < 0)
      throw bad("malformed section line near '" + word + "'");
    if (s.floats.size() + s.ints.size() >= max_sections || s.has(name))
      throw bad("too many sections, or '" + name + "' twice");
    const auto c = static_cast<std::size_t>(count);
    if (word == "f") {
      if (c > n - used)
        throw bad("section '" + name + "' of " + std::to_string(c) + " floats runs past the " + std::to_string(n) +
                  " stored");
      s.floats.emplace_back(name, data != nullptr ? std::vector<float>(data + used, data + used + c) : std::vector<float>{});
      s.float_sizes.emplace_back(name, c);
      used += c;
    } else {
      if (c > max_ints)
        throw bad("int section '" + name + "' of " + std::to_string(c) + " values");
      std::vector<std::int64_t> v(c);
      for (auto& x : v)
        if (!(in >> x))
          throw bad("int section '" + name + "' is cut short");
      s.ints.emplace_back(name, std::move(v));
    }
  }
  if (used != n)
    throw bad(std::to_string(n - used) + " floats stored beyond the sections");
  return s;
}

} // namespace gradwire::actors
