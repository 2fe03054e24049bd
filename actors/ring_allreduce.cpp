#include "actors/ring_allreduce.hpp"
#include "actors/worker_protocol.hpp"

#include "kernels/backend.hpp"
#include "kernels/bf16.hpp"
#include "kernels/error.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace gradwire::actors {

std::vector<std::pair<std::size_t, std::size_t>> make_buckets(std::size_t n, std::size_t bucket_floats) {
  check(bucket_floats > 0, "bucket size must be positive");
  const std::size_t count = std::max<std::size_t>(1, (n + bucket_floats - 1) / bucket_floats);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = count; i-- > 0;) {
    auto edge = [&](std::size_t k) { return k == count ? n : n * k / count / 16 * 16; };
    out.emplace_back(edge(i), edge(i + 1));
  }
  return out;
}

ring_allreduce::ring_allreduce(int pos, int size, int tag, std::vector<std::pair<std::size_t, std::size_t>> buckets,
                               std::size_t chunk_floats, done_fn done)
    : pos_(pos), size_(size), tag_(tag), buckets_(std::move(buckets)), done_(std::move(done)) {
  check(size >= 1 && pos >= 0 && pos < size, "ring position out of range");
  check(chunk_floats > 0, "chunk size must be positive");
  const auto n = static_cast<std::size_t>(size);
  for (const auto& [b, e] : buckets_) {
    std::vector<chunk_info> cs;
    const std::size_t len = e - b;
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t c0 = len * s / n, c1 = len * (s + 1) / n; c0 < c1; c0 += chunk_floats)
        cs.push_back({c0, std::min(c1, c0 + chunk_floats), static_cast<int>(s)});
    finals_.emplace_back(cs.size());
    chunks_.push_back(std::move(cs));
  }
}

std::string ring_allreduce::pending() const {
  std::string out;
  for (const auto& [key, a] : active_)
    out += (out.empty() ? "" : ", ") + std::string("round ") + std::to_string(key.first) + " bucket " +
           std::to_string(key.second) + " (" + std::to_string(a.count) + "/" +
           std::to_string(chunks_[static_cast<std::size_t>(key.second)].size()) + " chunks" +
           (a.started ? "" : ", not handed over") + ")";
  return out;
}

void ring_allreduce::start(caf::event_based_actor* self, std::int64_t round, int bucket, slice local, float scale) {
  if (bucket < 0 || static_cast<std::size_t>(bucket) >= buckets_.size())
    throw error("ring: no bucket " + std::to_string(bucket));
  const auto& [b, e] = buckets_[static_cast<std::size_t>(bucket)];
  if (static_cast<std::size_t>(local.numel()) != e - b)
    throw error("ring: bucket " + std::to_string(bucket) + " handed over with " + std::to_string(local.numel()) +
                " floats, expected " + std::to_string(e - b));
  if (round < lowest_round_)
    throw error("ring: bucket handed over for finished round " + std::to_string(round));
  if (bf16_ && (direct() || on_owned_))
    throw error("ring: bf16 chunks need a flat ring that passes sums (no direct algorithm, no sharded update)");
  lowest_round_ = round; // every earlier round is complete here
  auto& a = active_[{round, bucket}];
  a.local = std::move(local);
  a.scale = scale;
  a.started = true;
  a.t_start = now_on(clock_);
  const auto& cs = chunks_[static_cast<std::size_t>(bucket)];
  if (size_ == 1) { // the sum is the local contribution
    if (on_owned_)
      a.got.push_back({b, on_owned_(b, a.local.data(), nullptr, scale, e - b)});
    else {
      if (scale != 1.f)
        kernels::backend_for(kernels::device::cpu()).scale(e - b, scale, a.local.data());
      a.got.push_back({b, a.local});
    }
    a.count = cs.size();
    finish_if_complete(round, bucket);
    return;
  }
  const auto t_send = now_on(clock_);
  // Ring: this peer's own segment to the right neighbour. Direct: every
  // other chunk straight to its owner.
  for (std::size_t c = 0; c < cs.size(); ++c) {
    const auto seg = cs[c].segment;
    if (direct() ? seg == pos_ : seg != pos_)
      continue;
    send_chunk(self, direct() ? direct_[static_cast<std::size_t>(seg)] : right_, round, bucket,
               static_cast<int>(c), 0, on_wire(a.local, cs[c].begin, cs[c].end - cs[c].begin));
  }
  trace_.since("send", t_send, round);
  auto early = std::move(a.early);
  for (const auto& m : early)
    handle(self, round, bucket, a, m);
  finish_if_complete(round, bucket);
}

void ring_allreduce::send_chunk(caf::event_based_actor* self, const caf::actor& to, std::int64_t round, int bucket,
                                int chunk, int hop, slice data) {
  sent_bytes_ += static_cast<std::int64_t>(data.bytes());
  self->send(as_ring_hop_taker(to), ring_atom::value, tag_, round, bucket, chunk, hop, std::move(data));
}

void ring_allreduce::on_chunk(caf::event_based_actor* self, std::int64_t round, int bucket, int chunk, int hop, slice data) {
  received_bytes_ += static_cast<std::int64_t>(data.bytes());
  // A neighbour is at most one round ahead; a hierarchical group member may
  // already be one round on while its own group ring finishes the last.
  if (round < lowest_round_ - 1 || round > lowest_round_ + 1)
    throw error("ring " + std::to_string(tag_) + " peer " + std::to_string(pos_) + ": chunk of round " +
                std::to_string(round) + " while at round " + std::to_string(lowest_round_));
  if (bucket < 0 || static_cast<std::size_t>(bucket) >= buckets_.size() || chunk < 0 ||
      static_cast<std::size_t>(chunk) >= chunks_[static_cast<std::size_t>(bucket)].size() || hop < 0 ||
      hop > 2 * size_ - 3)
    throw error("ring: malformed chunk message (bucket " + std::to_string(bucket) + ", chunk " +
                std::to_string(chunk) + ", hop " + std::to_string(hop) + ")");
  auto& a = active_[{round, bucket}];
  if (!a.heard) {
    a.heard = true;
    a.t_first = now_on(clock_);
  }
  message m{chunk, hop, std::move(data)};
  if (!a.started) {
    a.early.push_back(std::move(m));
    return;
  }
  handle(self, round, bucket, a, m);
  finish_if_complete(round, bucket);
}

void ring_allreduce::handle_direct(caf::event_based_actor* self, std::int64_t round, int bucket, active& a,
                                   const message& m) {
  const auto t0 = now_on(clock_);
  const auto& ci = chunks_[static_cast<std::size_t>(bucket)][static_cast<std::size_t>(m.chunk)];
  const std::size_t len = ci.end - ci.begin;
  const bool mine = ci.segment == pos_;
  if (static_cast<std::size_t>(m.data.numel()) != len || m.hop > 1 || mine != (m.hop == 0))
    throw error("direct allreduce: chunk " + std::to_string(m.chunk) + " (hop " + std::to_string(m.hop) + ", " +
                std::to_string(m.data.numel()) + " floats) is not one this peer " +
                (mine ? "owns" : "waits for") + " as sent");
  const std::size_t offset = buckets_[static_cast<std::size_t>(bucket)].first + ci.begin;
  if (m.hop == 1) { // the owner's result
    a.got.push_back({offset, m.data});
    ++a.count;
    trace_.since("gather", t0, round);
    return;
  }
  auto& parts = a.parts[m.chunk];
  parts.push_back(m.data);
  if (parts.size() < static_cast<std::size_t>(size_ - 1))
    return;
  // Every contribution is here: the sum in one pass over them.
  auto& be = kernels::backend_for(kernels::device::cpu());
  const float* local = a.local.data() + ci.begin;
  slice fin;
  if (parts.size() == 1 && on_owned_) {
    fin = on_owned_(offset, parts[0].data(), local, a.scale, len);
  } else {
    slice sum = final_buffer(bucket, m.chunk, len);
    be.add(len, parts[0].data(), local, sum.data(), parts.size() == 1 ? a.scale : 1.f);
    for (std::size_t k = 1; k < parts.size(); ++k)
      be.axpy(len, 1.f, parts[k].data(), sum.data());
    if (parts.size() > 1 && a.scale != 1.f)
      be.scale(len, a.scale, sum.data());
    fin = on_owned_ ? on_owned_(offset, sum.data(), nullptr, 1.f, len) : sum;
  }
  a.parts.erase(m.chunk);
  a.got.push_back({offset, fin});
  ++a.count;
  for (int p = 0; p < size_; ++p)
    if (p != pos_)
      send_chunk(self, direct_[static_cast<std::size_t>(p)], round, bucket, m.chunk, 1, fin);
  trace_.since("reduce", t0, round);
}

std::size_t ring_allreduce::wire_len(std::size_t len) const { return bf16_ ? kernels::bf16_words(len) : len; }

slice ring_allreduce::on_wire(const slice& buf, std::size_t offset, std::size_t len) const {
  if (!bf16_)
    return buf.view(offset, {static_cast<std::int64_t>(len)});
  auto packed = slice::empty({static_cast<std::int64_t>(kernels::bf16_words(len))});
  kernels::pack_bf16(buf.data() + offset, len, reinterpret_cast<std::uint32_t*>(packed.data()));
  return packed;
}

/// The ring's hops with bf16 chunks: each partial sum added in fp32 and
/// rounded as it leaves; the owner rounds the final sum and keeps the
/// rounded values, and every other peer decodes the same words.
void ring_allreduce::handle_bf16(caf::event_based_actor* self, std::int64_t round, int bucket, active& a,
                                 const message& m) {
  const auto t0 = now_on(clock_);
  const auto& ci = chunks_[static_cast<std::size_t>(bucket)][static_cast<std::size_t>(m.chunk)];
  const std::size_t len = ci.end - ci.begin;
  if (static_cast<std::size_t>(m.data.numel()) != wire_len(len))
    throw error("ring: bf16 chunk of " + std::to_string(m.data.numel()) + " words, expected " +
                std::to_string(wire_len(len)));
  const auto* words = reinterpret_cast<const std::uint32_t*>(m.data.data());
  const std::size_t offset = buckets_[static_cast<std::size_t>(bucket)].first + ci.begin;
  if (m.hop < size_ - 2) { // reduce-scatter: add ours, pass the rounded sum on
    kernels::unpack_bf16<true>(words, len, a.local.data() + ci.begin);
    send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, on_wire(a.local, ci.begin, len));
    trace_.since("reduce", t0, round);
    return;
  }
  slice fin = final_buffer(bucket, m.chunk, len);
  if (m.hop == size_ - 2) { // the last contribution: this peer owns the chunk
    kernels::unpack_bf16<false>(words, len, fin.data());
    kernels::backend_for(kernels::device::cpu()).add(len, fin.data(), a.local.data() + ci.begin, fin.data(), a.scale);
    auto sent = on_wire(fin, 0, len);
    kernels::unpack_bf16<false>(reinterpret_cast<const std::uint32_t*>(sent.data()), len, fin.data());
    send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, std::move(sent));
    trace_.since("reduce", t0, round);
  } else { // all-gather: the owner's rounded sum, decoded here and passed on as it came
    kernels::unpack_bf16<false>(words, len, fin.data());
    if (m.hop < 2 * size_ - 3)
      send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, m.data);
    trace_.since("gather", t0, round);
  }
  a.got.push_back({offset, fin});
  ++a.count;
}

void ring_allreduce::handle(caf::event_based_actor* self, std::int64_t round, int bucket, active& a, const message& m) {
  if (direct()) {
    handle_direct(self, round, bucket, a, m);
    return;
  }
  if (bf16_) {
    handle_bf16(self, round, bucket, a, m);
    return;
  }
  const auto t0 = now_on(clock_);
  const auto& ci = chunks_[static_cast<std::size_t>(bucket)][static_cast<std::size_t>(m.chunk)];
  const std::size_t len = ci.end - ci.begin;
  if (static_cast<std::size_t>(m.data.numel()) != len)
    throw error("ring: chunk of " + std::to_string(m.data.numel()) + " floats, expected " + std::to_string(len));
  auto& be = kernels::backend_for(kernels::device::cpu());
  const std::size_t offset = buckets_[static_cast<std::size_t>(bucket)].first + ci.begin;
  const auto shape = kernels::shape_t{static_cast<std::int64_t>(len)};
  if (m.hop < size_ - 2) { // reduce-scatter: add ours in place, pass it on
    float* mine = a.local.data() + ci.begin;
    be.axpy(len, 1.f, m.data.data(), mine);
    send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, a.local.view(ci.begin, shape));
    trace_.since("reduce", t0, round);
    return;
  }
  if (m.hop == size_ - 2) { // the last contribution: this peer owns the chunk
    slice fin;
    if (on_owned_)
      fin = on_owned_(offset, m.data.data(), a.local.data() + ci.begin, a.scale, len);
    else {
      fin = final_buffer(bucket, m.chunk, len);
      be.add(len, m.data.data(), a.local.data() + ci.begin, fin.data(), a.scale);
    }
    a.got.push_back({offset, fin});
    ++a.count;
    if (size_ > 1)
      send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, fin);
    trace_.since("reduce", t0, round);
    return;
  }
  a.got.push_back({offset, m.data}); // all-gather: keep the shared final chunk
  ++a.count;
  if (m.hop < 2 * size_ - 3)
    send_chunk(self, right_, round, bucket, m.chunk, m.hop + 1, m.data);
  trace_.since("gather", t0, round);
}

slice ring_allreduce::final_buffer(int bucket, int chunk, std::size_t len) {
  auto& pool = finals_[static_cast<std::size_t>(bucket)][static_cast<std::size_t>(chunk)];
  auto fresh = [len] {
    auto s = slice::empty({static_cast<std::int64_t>(len)});
    std::memset(s.data(), 0, len * sizeof(float)); // its pages faulted in here, not inside a later round
    return s;
  };
  // Two from the first round: a peer lets go of a round's result (across
  // processes, a release frame) while the next round runs, so the buffer
  // of two rounds back is the one free. With one, a round that found it
  // still held would take a fresh buffer and fault its pages in mid-round.
  if (pool.empty()) {
    pool.push_back(fresh());
    pool.push_back(fresh());
  }
  // Reuse a buffer once every peer has let go of it (this pool holds the
  // only reference); the acquire fence orders their last reads before
  // this peer's writes.
  for (const auto& s : pool)
    if (s.shared_storage().use_count() == 1) {
      std::atomic_thread_fence(std::memory_order_acquire);
      return s;
    }
  // All held (a peer slow to let go): one more, up to four; beyond that
  // the oldest is left to its holders and replaced.
  if (pool.size() >= 4)
    pool.erase(pool.begin());
  pool.push_back(fresh());
  return pool.back();
}

void ring_allreduce::finish_if_complete(std::int64_t round, int bucket) {
  auto it = active_.find({round, bucket});
  if (it == active_.end() || !it->second.started || it->second.count < chunks_[static_cast<std::size_t>(bucket)].size())
    return;
  auto& a = it->second;
  done_info d;
  d.round = round;
  d.bucket = bucket;
  d.result = std::move(a.got);
  d.wait_seconds = a.heard && a.t_first > a.t_start ? std::chrono::duration<double>(a.t_first - a.t_start).count() : 0;
  active_.erase(it);
  done_(std::move(d));
}

} // namespace gradwire::actors
