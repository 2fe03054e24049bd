// The node's rejoin protocol (rejoin.hpp).
#include "transport/rejoin.hpp"

#include "transport/node.hpp"

#include <chrono>
#include <cstring>

namespace gradwire::transport {

namespace {
/// Fence-slot control frames: a cut-off rank asks rank 0 to be let back
/// in; rank 0 tells every rank to hear rank r again (r itself: everyone).
using knock_atom = caf::atom_constant<caf::atom("gwknock")>;
using readmit_atom = caf::atom_constant<caf::atom("gwreadmit")>;
/// Rank 0 to every rank: rank r's process was replaced, here is its address.
using address_atom = caf::atom_constant<caf::atom("gwaddr")>;
/// Rank 0 to a rank that knocked: heard, it decides later (keep knocking).
using heard_atom = caf::atom_constant<caf::atom("gwheard")>;
/// Rank 0 to a rank it has cut off: it will not be let back in (why).
using dismiss_atom = caf::atom_constant<caf::atom("gwdismiss")>;

/// An address as words (the frame's vocabulary has no byte strings):
/// its length, then the bytes packed eight to a word.
std::vector<std::int64_t> packed(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::int64_t> out(1 + (bytes.size() + 7) / 8, 0);
  out[0] = static_cast<std::int64_t>(bytes.size());
  if (!bytes.empty())
    std::memcpy(out.data() + 1, bytes.data(), bytes.size());
  return out;
}

/// Empty when the words are not what packed() makes (at most `limit` bytes).
std::vector<std::uint8_t> unpacked(const std::vector<std::int64_t>& words, std::size_t limit) {
  if (words.empty() || words[0] <= 0 || static_cast<std::uint64_t>(words[0]) > limit ||
      words.size() != 1 + (static_cast<std::size_t>(words[0]) + 7) / 8)
    return {};
  std::vector<std::uint8_t> out(static_cast<std::size_t>(words[0]));
  std::memcpy(out.data(), words.data() + 1, out.size());
  return out;
}
} // namespace

bool rejoin_protocol::on_control(int src, const caf::message& msg) {
  const auto leads = [&msg](caf::atom_value a) {
    return msg.size() >= 1 && msg.match_element<caf::atom_value>(0) && msg.get_as<caf::atom_value>(0) == a;
  };
  if (msg.size() == 1 && leads(knock_atom::value))
    on_knock(src);
  else if (msg.size() == 1 && leads(heard_atom::value)) {
    if (src == 0)
      knock_heard_ms_ = node::now_ms();
  } else if (msg.size() == 2 && leads(dismiss_atom::value) && msg.match_element<std::string>(1))
    on_dismiss(src, msg.get_as<std::string>(1));
  else if (msg.size() == 2 && leads(readmit_atom::value) && msg.match_element<int>(1))
    on_readmit(src, msg.get_as<int>(1));
  else if (msg.size() == 3 && leads(address_atom::value) && msg.match_element<int>(1) &&
           msg.match_element<std::vector<std::int64_t>>(2))
    on_new_address(src, msg.get_as<int>(1), msg.get_as<std::vector<std::int64_t>>(2));
  else
    return false;
  return true;
}

void rejoin_protocol::on_knock(int src) {
  if (node_.rank() != 0 || !node_.is_cut_off(src)) // anyone else's knock is no news
    return;
  std::function<void(int)> cb;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cb = on_knock_;
  }
  if (cb) {
    cb(src);
    node_.control(src, caf::make_message(heard_atom::value));
  }
}

void rejoin_protocol::on_dismiss(int src, const std::string& why) {
  std::function<void(const std::string&)> cb;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cb = on_dismissed_;
  }
  if (src == 0 && cb)
    cb(why.substr(0, 1024));
}

void rejoin_protocol::on_readmit(int src, int r) {
  if (src != 0 || r < 0 || r >= node_.size())
    return; // only rank 0 readmits, and only ranks of this job
  if (r != node_.rank()) {
    node_.readmit(r);
    return;
  }
  for (int p = 0; p < node_.size(); ++p) // this rank is back in: it hears everyone again
    if (p != node_.rank())
      node_.readmit(p);
  std::function<void()> cb;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cb = on_readmitted_;
  }
  if (cb)
    cb();
}

void rejoin_protocol::on_new_address(int src, int r, const std::vector<std::int64_t>& packed) {
  const auto address = unpacked(packed, max_address_bytes);
  if (src != 0 || r <= 0 || r >= node_.size() || r == node_.rank() || address.empty()) {
    node_.reject("frame refused: a replaced process's address from rank " + std::to_string(src) + " (only rank 0 "
           "announces one, for another rank, of 1 to " + std::to_string(max_address_bytes) + " bytes)");
    return;
  }
  try {
    node_.link_->reconnect(r, address);
  } catch (const std::exception& e) {
    node_.reject("rank " + std::to_string(r) + "'s new process cannot be reached: " + e.what());
  }
}

void rejoin_protocol::admit_process(int peer, const std::vector<std::uint8_t>& address) {
  const int n = node_.size();
  check(node_.rank() == 0 && peer > 0 && peer < n,
        "admit_process: rank 0 admits ranks 1.." + std::to_string(n - 1) + ", not " + std::to_string(peer));
  node_.link_->reconnect(peer, address);
  const auto words = packed(address);
  for (int r = 1; r < n; ++r)
    if (r != peer && !node_.is_down(r))
      node_.control(r, caf::make_message(address_atom::value, peer, words));
}

void rejoin_protocol::dismiss_cut_off(const std::string& why) {
  for (int r = 1; r < node_.size(); ++r)
    if (node_.is_cut_off(r))
      node_.control(r, caf::make_message(dismiss_atom::value, why));
}

void rejoin_protocol::knock() { node_.control(0, caf::make_message(knock_atom::value)); }

void rejoin_protocol::readmit_everywhere(int peer) {
  node_.readmit(peer);
  const auto msg = caf::make_message(readmit_atom::value, peer);
  for (int r = 1; r < node_.size(); ++r) // the others first: each hears `peer` again before it is told to go on
    if (r != peer && !node_.is_down(r))
      node_.control(r, msg);
  node_.control(peer, msg);
}

void rejoin_protocol::set_on_knock(std::function<void(int)> f) {
  std::lock_guard<std::mutex> lk(mu_);
  on_knock_ = std::move(f);
}

bool rejoin_protocol::hears_knocks() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<bool>(on_knock_);
}

void rejoin_protocol::set_on_readmitted(std::function<void()> f) {
  std::lock_guard<std::mutex> lk(mu_);
  on_readmitted_ = std::move(f);
}

void rejoin_protocol::set_on_dismissed(std::function<void(const std::string&)> f) {
  std::lock_guard<std::mutex> lk(mu_);
  on_dismissed_ = std::move(f);
}

} // namespace gradwire::transport
