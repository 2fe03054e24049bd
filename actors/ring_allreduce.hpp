#pragma once
/// @file ring_allreduce.hpp
/// The ring allreduce protocol of one ring, as a state machine that a ring
/// peer actor drives (a peer in a hierarchical allreduce drives two).
///
/// Each bucket (a range of the gradient buffer) is cut into `size`
/// segments and each segment into chunks of at most `chunk_floats`. Every
/// chunk travels on its own: reduce-scatter hops 0 .. size-2 carry a
/// partial sum to the right neighbour, which adds its own contribution in
/// place and passes it on; the peer that adds the last contribution (the
/// chunk's owner) writes (sum * scale) into a buffer of its own, and all-gather
/// hops size-1 .. 2*size-3 pass that one read-only buffer round the ring.
/// Chunks of one bucket, and buckets, are in flight at once (pipelined);
/// nothing waits for a whole segment.
///
/// Buffers: a peer's local bucket is a view of its worker's gradient
/// buffer, handed over until the bucket completes. A reduce-scatter hop
/// sends a view of it; the neighbour reads it before anything downstream
/// of that read can lead back to a write (the all-gather of the same chunk
/// and the next round both come after), so no copy is needed. The final
/// chunks come from a pool per chunk (two from the first round, up to
/// four) and one is written again only once no one else holds it.
///
/// Flow control: a peer can be at most one round ahead of its neighbours
/// (finishing round r needs every peer's round-r contribution), so each
/// peer holds at most two rounds of chunk messages: the window is
/// structural, and messages for any other round are a protocol error.

#include "actors/messages.hpp"
#include "actors/trace.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gradwire::actors {

/// Even ranges of the buffer [0, n) of at most `bucket_floats` each, in the
/// order backward produces them (from the end of the buffer).
std::vector<std::pair<std::size_t, std::size_t>> make_buckets(std::size_t n, std::size_t bucket_floats);

class ring_allreduce {
public:
  struct done_info {
    std::int64_t round = 0;
    int bucket = 0;
    pieces result;       ///< covering the bucket, each read-only
    double wait_seconds = 0; ///< from the hand-over to the first chunk from the left
  };
  using done_fn = std::function<void(done_info)>;

  /// Position `pos` in a ring of `size` peers; `tag` tells apart the rings
  /// one peer takes part in; buckets are ranges of the parameter buffer.
  ring_allreduce(int pos, int size, int tag, std::vector<std::pair<std::size_t, std::size_t>> buckets,
                 std::size_t chunk_floats, done_fn done);

  void set_right(caf::actor right) { right_ = std::move(right); }
  /// Direct instead of ring (every peer's handle, by position): each chunk
  /// goes straight to its owner (hop 0), which sums all N contributions
  /// in one pass and sends the result straight to every other peer (hop
  /// 1). The same data volume as the ring in 2 steps instead of 2(N-1):
  /// latency-bound sizes on many peers, where each ring hop waits for a
  /// peer to be scheduled (MPI picks recursive doubling there).
  void set_direct(std::vector<caf::actor> peers) { direct_ = std::move(peers); }
  /// transport.wire_dtype = "bf16": every chunk crosses as bf16, two
  /// values to a word (kernels/bf16.hpp), half the bytes. A hop adds the
  /// partial sum it receives to its own values in fp32 and rounds the
  /// result as it sends it on; a chunk's owner rounds the final sum once
  /// and keeps the rounded values itself, so every peer holds the same
  /// bits whatever the arrival order. Flat ring only: not with set_direct
  /// or set_on_owned (the sharded update passes fp32 parameters).
  void set_wire_bf16() { bf16_ = true; }
  bool direct() const { return !direct_.empty(); }
  /// Spans "send" (a bucket's own chunks), "reduce" (a chunk added and
  /// passed on) and "gather" (a final chunk passed on), arg = round.
  void set_trace(trace_ref t) { trace_ = std::move(t); }
  /// Virtual time: waits are timed on this clock (null: the machine's).
  void set_clock(const virtual_clock* c) { clock_ = c; }
  /// The first round is `r` (a resumed run starts at its checkpoint's step).
  void set_first_round(std::int64_t r) { lowest_round_ = r; }
  /// Called where this peer adds the last contribution to a chunk (it owns
  /// the chunk): the sum is (in0 + in1) * scale (in0 * scale when in1 is
  /// null, a ring of one), over `len` floats. Returns what the all-gather
  /// passes on: e.g. a view of the parameters the owner updated from the
  /// sum (a sharded optimizer, which reads the two contributions in its own
  /// pass and writes only its weights). It must stay unwritten until this
  /// peer's next round (every peer has let go of this round's result by
  /// then: the ring's own final buffers rely on the same). Default: the
  /// sum, in a buffer pooled across rounds.
  using owned_fn = std::function<slice(std::size_t offset, const float* in0, const float* in1, float scale,
                                       std::size_t len)>;
  void set_on_owned(owned_fn f) { on_owned_ = std::move(f); }
  int size() const { return size_; }

  /// The local contribution of `bucket` for `round`: a writable view of
  /// the bucket's range, handed over until done. The result is sum * scale.
  void start(caf::event_based_actor* self, std::int64_t round, int bucket, slice local, float scale);
  /// A chunk from the left neighbour.
  void on_chunk(caf::event_based_actor* self, std::int64_t round, int bucket, int chunk, int hop, slice data);
  /// Buckets started but not complete, for error messages ("round 3: buckets 0, 2").
  std::string pending() const;

  /// Payload bytes of the chunks this peer sent and received since the
  /// last call: (sent, received).
  std::pair<std::int64_t, std::int64_t> take_bytes() {
    const std::pair<std::int64_t, std::int64_t> out{sent_bytes_, received_bytes_};
    sent_bytes_ = received_bytes_ = 0;
    return out;
  }

private:
  void send_chunk(caf::event_based_actor* self, const caf::actor& to, std::int64_t round, int bucket, int chunk,
                  int hop, slice data);
  std::int64_t sent_bytes_ = 0, received_bytes_ = 0;
  struct chunk_info {
    std::size_t begin, end; ///< relative to the bucket
    int segment;
  };
  struct message {
    int chunk, hop;
    slice data;
  };
  struct active {
    slice local;
    float scale = 1.f;
    pieces got;
    std::size_t count = 0;
    bool started = false;
    std::chrono::steady_clock::time_point t_start, t_first;
    bool heard = false;
    std::vector<message> early; ///< chunks that came before the hand-over
    std::map<int, std::vector<slice>> parts; ///< direct: contributions to chunks this peer owns
  };

  void handle(caf::event_based_actor* self, std::int64_t round, int bucket, active& a, const message& m);
  void handle_direct(caf::event_based_actor* self, std::int64_t round, int bucket, active& a, const message& m);
  void finish_if_complete(std::int64_t round, int bucket);
  /// A buffer for a chunk's final values, pooled across rounds.
  slice final_buffer(int bucket, int chunk, std::size_t len);
  /// The floats a chunk of `len` values takes on the wire.
  std::size_t wire_len(std::size_t len) const;
  /// What goes on the wire for `len` values at `x`: a view of them, or
  /// (bf16) a fresh packed copy.
  slice on_wire(const slice& buf, std::size_t offset, std::size_t len) const;
  void handle_bf16(caf::event_based_actor* self, std::int64_t round, int bucket, active& a, const message& m);

  int pos_, size_, tag_;
  std::vector<std::pair<std::size_t, std::size_t>> buckets_;
  std::vector<std::vector<chunk_info>> chunks_; ///< per bucket
  std::vector<std::vector<std::vector<slice>>> finals_; ///< per bucket and chunk: pooled final buffers
  caf::actor right_;
  std::vector<caf::actor> direct_;
  trace_ref trace_;
  const virtual_clock* clock_ = nullptr;
  owned_fn on_owned_;
  done_fn done_;
  std::map<std::pair<std::int64_t, int>, active> active_;
  std::int64_t lowest_round_ = 0; ///< rounds below this are finished
  bool bf16_ = false;
};

} // namespace gradwire::actors
