#include "transport/codec.hpp"

#include "actors/messages.hpp"
#include "transport/wire.capnp.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>

namespace gradwire::transport {

using actors::pieces;
using actors::slice;

std::uint64_t token_hash(const std::string& token) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : token) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

void set_ref(wire::ActorRef::Builder b, actor_ref r) {
  b.setRank(r.rank);
  b.setSlot(r.slot);
}

std::string type_name(const caf::message& msg, std::size_t i) {
  const auto* ti = msg.type(i).second;
  return ti ? ti->name() : "type #" + std::to_string(msg.type(i).first);
}

} // namespace

namespace {

/// The message's tensors in order: the frame's data segment.
struct tensor_list {
  std::vector<slice> all;
  std::uint32_t add(const slice& t) {
    check(t.defined() && t.type() == kernels::dtype::f32 && t.dev().is_cpu(),
          "only float32 host tensors cross processes");
    all.push_back(t);
    return static_cast<std::uint32_t>(all.size() - 1);
  }
};

void write_metrics(wire::StepMetrics::Builder w, const actors::step_metrics& m) {
  w.setRank(m.rank);
  w.setStep(m.step);
  w.setSamples(m.samples);
  w.setSteps(m.steps);
  w.setTime(m.time);
  w.setLoss(m.loss);
  w.setComputeMs(m.compute_ms);
  w.setCommMs(m.comm_ms);
  w.setWaitMs(m.wait_ms);
  w.setStaleness(m.staleness);
  w.setStalenessP99(m.staleness_p99);
  w.setBytesSent(m.bytes_sent);
  w.setBytesReceived(m.bytes_received);
  w.setCompressError(m.compress_error);
}

void write_report(wire::WorkerReport::Builder w, const actors::worker_report& r, tensor_list& tensors) {
  w.setRank(r.rank);
  w.setSteps(r.steps);
  w.setSamples(r.samples);
  w.setSeconds(r.seconds);
  w.setComputeSeconds(r.compute_seconds);
  w.setCommSeconds(r.comm_seconds);
  w.setLastLoss(r.last_loss);
  auto st = w.initStaleness(static_cast<unsigned>(r.staleness.size()));
  for (unsigned k = 0; k < r.staleness.size(); ++k)
    st.set(k, r.staleness[k]);
  w.setDropped(r.dropped);
  w.setWaitSeconds(r.wait_seconds);
  w.setParams(r.params.defined() ? static_cast<std::int32_t>(tensors.add(r.params)) : -1);
  w.setState(r.state.defined() ? static_cast<std::int32_t>(tensors.add(r.state)) : -1);
  w.setError(r.error);
  auto bs = w.initBatches(static_cast<unsigned>(r.batches.size()));
  for (unsigned k = 0; k < r.batches.size(); ++k)
    bs.set(k, r.batches[k]);
  auto sc = w.initStepComputeMs(static_cast<unsigned>(r.step_compute_ms.size()));
  for (unsigned k = 0; k < r.step_compute_ms.size(); ++k)
    sc.set(k, r.step_compute_ms[k]);
  w.setReportedBy(r.reported_by);
  w.setBytesSent(r.bytes_sent);
  w.setBytesReceived(r.bytes_received);
  w.setCompressErrorSum(r.compress_error_sum);
  w.setCompressedSteps(r.compressed_steps);
}

/// A list-valued element (actors, pieces, int64s); false for any other type.
bool write_list(wire::Value::Builder v, const caf::message& msg, std::size_t i, tensor_list& tensors,
                const std::function<actor_ref(const caf::actor&)>& ref) {
  if (msg.match_element<std::vector<caf::actor>>(i)) {
    const auto& xs = msg.get_as<std::vector<caf::actor>>(i);
    auto l = v.initActors(static_cast<unsigned>(xs.size()));
    for (unsigned k = 0; k < xs.size(); ++k)
      set_ref(l[k], ref(xs[k]));
  } else if (msg.match_element<pieces>(i)) {
    const auto& xs = msg.get_as<pieces>(i);
    auto l = v.initPieces(static_cast<unsigned>(xs.size()));
    for (unsigned k = 0; k < xs.size(); ++k) {
      l[k].setOffset(xs[k].offset);
      l[k].setTensor(tensors.add(xs[k].data));
    }
  } else if (msg.match_element<std::vector<std::int64_t>>(i)) {
    const auto& xs = msg.get_as<std::vector<std::int64_t>>(i);
    auto l = v.initI64s(static_cast<unsigned>(xs.size()));
    for (unsigned k = 0; k < xs.size(); ++k)
      l.set(k, xs[k]);
  } else
    return false;
  return true;
}

/// Element i of `msg` into `v`; throws for a type without a wire encoding.
void write_value(wire::Value::Builder v, const caf::message& msg, std::size_t i, tensor_list& tensors,
                 const std::function<actor_ref(const caf::actor&)>& ref) {
  if (msg.match_element<caf::atom_value>(i))
    v.setAtom(static_cast<std::uint64_t>(msg.get_as<caf::atom_value>(i)));
  else if (msg.match_element<std::int32_t>(i))
    v.setI32(msg.get_as<std::int32_t>(i));
  else if (msg.match_element<std::int64_t>(i))
    v.setI64(msg.get_as<std::int64_t>(i));
  else if (msg.match_element<std::uint64_t>(i))
    v.setU64(msg.get_as<std::uint64_t>(i));
  else if (msg.match_element<float>(i))
    v.setF32(msg.get_as<float>(i));
  else if (msg.match_element<double>(i))
    v.setF64(msg.get_as<double>(i));
  else if (msg.match_element<bool>(i))
    v.setBoolean(msg.get_as<bool>(i));
  else if (msg.match_element<std::string>(i))
    v.setText(msg.get_as<std::string>(i));
  else if (msg.match_element<slice>(i))
    v.setTensor(tensors.add(msg.get_as<slice>(i)));
  else if (msg.match_element<caf::actor>(i))
    set_ref(v.initActor(), ref(msg.get_as<caf::actor>(i)));
  else if (msg.match_element<actors::step_metrics>(i))
    write_metrics(v.initMetrics(), msg.get_as<actors::step_metrics>(i));
  else if (msg.match_element<actors::worker_report>(i))
    write_report(v.initReport(), msg.get_as<actors::worker_report>(i), tensors);
  else if (!write_list(v, msg, i, tensors, ref))
    throw error("cannot send a " + type_name(msg, i) + " (element " + std::to_string(i) +
                ") across processes: no wire encoding for it");
}

/// The data segment: one tensor as it is (zero-copy: the sender's own
/// buffer), several packed back to back.
slice data_segment(const std::vector<slice>& tensors, std::size_t total) {
  if (tensors.size() == 1)
    return tensors[0];
  if (tensors.empty())
    return {};
  auto out = slice::empty({static_cast<std::int64_t>(total / sizeof(float))});
  auto* dst_bytes = reinterpret_cast<unsigned char*>(out.data());
  for (const auto& t : tensors) {
    std::memcpy(dst_bytes, t.data(), t.bytes());
    dst_bytes += t.bytes();
  }
  return out;
}

} // namespace

encoded_frame encode(const caf::message& msg, const frame_context& ctx, std::uint32_t dst, actor_ref sender,
                     const std::function<actor_ref(const caf::actor&)>& ref, std::uint64_t request_id,
                     frame_kind kind) {
  // A small first segment (a ring chunk's header is ~40 words; larger ones
  // grow): Cap'n Proto's default 8 KiB, zeroed on every send, would be most
  // of an encode's cost right after a step's compute has evicted the caches.
  capnp::MallocMessageBuilder mb(128);
  auto h = mb.initRoot<wire::Header>();
  h.setMagic(frame_magic);
  h.setToken(ctx.token);
  h.setSrc(ctx.rank);
  h.setDst(dst);
  set_ref(h.initSender(), sender);
  h.setRequestId(request_id);
  h.setReply(static_cast<std::uint8_t>(kind));
  tensor_list tensors;
  GW_CHECK(msg.size() <= ctx.limits.max_values, "message of " + std::to_string(msg.size()) + " elements is over the limit");
  auto values = h.initValues(static_cast<unsigned>(msg.size()));
  for (std::size_t i = 0; i < msg.size(); ++i)
    write_value(values[static_cast<unsigned>(i)], msg, i, tensors, ref);
  auto lens = h.initTensors(static_cast<unsigned>(tensors.all.size()));
  std::size_t total = 0;
  for (unsigned k = 0; k < tensors.all.size(); ++k) {
    lens.set(k, static_cast<std::uint64_t>(tensors.all[k].numel()));
    total += tensors.all[k].bytes();
  }
  encoded_frame out;
  out.data = data_segment(tensors.all, total);
  GW_CHECK(total <= ctx.limits.max_data_bytes, "message data of " + std::to_string(total) + " bytes is over the limit");
  out.header.resize(capnp::computeSerializedSizeInWords(mb)); // written in place: no flat copy in between
  kj::ArrayOutputStream os(kj::arrayPtr(reinterpret_cast<kj::byte*>(out.header.data()), out.header.size() * sizeof(capnp::word)));
  capnp::writeMessage(os, mb);
  check(out.header.size() * 8 <= ctx.limits.max_header_bytes, "message header is over the limit");
  return out;
}

namespace {

actor_ref read_ref(wire::ActorRef::Reader r) {
  return {r.getRank(), r.getSlot()};
}

/// The data frame cut into the header's tensors, every length checked
/// against the limits and against what the frame holds.
class frame_tensors {
public:
  frame_tensors(capnp::List<std::uint64_t>::Reader lens, const slice& data, const frame_context& ctx)
      : lens_(lens), data_(data) {
    std::size_t total = 0;
    for (auto n : lens) {
      if (n > ctx.limits.max_data_bytes / sizeof(float))
        throw frame_error("tensor of " + std::to_string(n) + " floats is over the limit");
      starts_.push_back(total);
      total += n;
    }
    const std::size_t have = data.defined() ? static_cast<std::size_t>(data.numel()) : 0;
    if (total != have)
      throw frame_error("header announces " + std::to_string(total) + " floats, data frame holds " +
                        std::to_string(have));
  }
  slice at(std::uint32_t k) const {
    if (k >= lens_.size())
      throw frame_error("tensor index " + std::to_string(k) + " out of range");
    return data_.view(starts_[k], {static_cast<std::int64_t>(lens_[k])});
  }

private:
  capnp::List<std::uint64_t>::Reader lens_;
  const slice& data_;
  std::vector<std::size_t> starts_;
};

actors::step_metrics read_metrics(wire::StepMetrics::Reader w) {
  actors::step_metrics m;
  m.rank = w.getRank();
  m.step = w.getStep();
  m.samples = w.getSamples();
  m.steps = w.getSteps();
  m.time = w.getTime();
  m.loss = w.getLoss();
  m.compute_ms = w.getComputeMs();
  m.comm_ms = w.getCommMs();
  m.wait_ms = w.getWaitMs();
  m.staleness = w.getStaleness();
  m.staleness_p99 = w.getStalenessP99();
  m.bytes_sent = w.getBytesSent();
  m.bytes_received = w.getBytesReceived();
  m.compress_error = w.getCompressError();
  return m;
}

actors::worker_report read_report(wire::WorkerReport::Reader w, const frame_tensors& tensors) {
  actors::worker_report r;
  r.rank = w.getRank();
  r.steps = w.getSteps();
  r.samples = w.getSamples();
  r.seconds = w.getSeconds();
  r.compute_seconds = w.getComputeSeconds();
  r.comm_seconds = w.getCommSeconds();
  r.last_loss = w.getLastLoss();
  for (auto x : w.getStaleness())
    r.staleness.push_back(x);
  r.dropped = w.getDropped();
  r.wait_seconds = w.getWaitSeconds();
  if (w.getParams() >= 0)
    r.params = tensors.at(static_cast<std::uint32_t>(w.getParams()));
  if (w.getState() >= 0)
    r.state = tensors.at(static_cast<std::uint32_t>(w.getState()));
  r.error = w.getError().cStr();
  for (auto x : w.getBatches())
    r.batches.push_back(x);
  for (auto x : w.getStepComputeMs())
    r.step_compute_ms.push_back(x);
  r.reported_by = w.getReportedBy();
  r.bytes_sent = w.getBytesSent();
  r.bytes_received = w.getBytesReceived();
  r.compress_error_sum = w.getCompressErrorSum();
  r.compressed_steps = w.getCompressedSteps();
  return r;
}

/// A list-valued element (actors, pieces, int64s) onto `mb`; false for any other kind.
bool read_list(caf::message_builder& mb, wire::Value::Reader v, const frame_tensors& tensors,
               const std::function<caf::actor(actor_ref)>& resolve) {
  switch (v.which()) {
  case wire::Value::ACTORS: {
    std::vector<caf::actor> xs;
    for (auto r : v.getActors())
      xs.push_back(resolve(read_ref(r)));
    mb.append(std::move(xs));
    return true;
  }
  case wire::Value::PIECES: {
    pieces xs;
    for (auto p : v.getPieces())
      xs.push_back({static_cast<std::size_t>(p.getOffset()), tensors.at(p.getTensor())});
    mb.append(std::move(xs));
    return true;
  }
  case wire::Value::I64S: {
    std::vector<std::int64_t> xs;
    for (auto x : v.getI64s())
      xs.push_back(x);
    mb.append(std::move(xs));
    return true;
  }
  default: return false;
  }
}

/// One element onto `mb`; an unknown kind is a frame error.
void read_value(caf::message_builder& mb, wire::Value::Reader v, const frame_tensors& tensors,
                const std::function<caf::actor(actor_ref)>& resolve) {
  switch (v.which()) {
  case wire::Value::ATOM: mb.append(static_cast<caf::atom_value>(v.getAtom())); break;
  case wire::Value::I32: mb.append(v.getI32()); break;
  case wire::Value::I64: mb.append(static_cast<std::int64_t>(v.getI64())); break;
  case wire::Value::U64: mb.append(static_cast<std::uint64_t>(v.getU64())); break;
  case wire::Value::F32: mb.append(v.getF32()); break;
  case wire::Value::F64: mb.append(v.getF64()); break;
  case wire::Value::BOOLEAN: mb.append(v.getBoolean()); break;
  case wire::Value::TEXT: mb.append(std::string(v.getText().cStr())); break;
  case wire::Value::TENSOR: mb.append(tensors.at(v.getTensor())); break;
  case wire::Value::ACTOR: mb.append(resolve(read_ref(v.getActor()))); break;
  case wire::Value::METRICS: mb.append(read_metrics(v.getMetrics())); break;
  case wire::Value::REPORT: mb.append(read_report(v.getReport(), tensors)); break;
  default:
    if (!read_list(mb, v, tensors, resolve))
      throw frame_error("unknown value kind " + std::to_string(static_cast<int>(v.which())));
  }
}

/// The header's own fields: magic, token, ranks, kind, request id.
decoded_frame read_header(wire::Header::Reader h, const frame_context& ctx) {
  if (h.getMagic() != frame_magic)
    throw frame_error("not a gradwire frame (bad magic)");
  if (h.getToken() != ctx.token)
    throw frame_error("wrong job token from rank " + std::to_string(h.getSrc()));
  decoded_frame out;
  out.src = h.getSrc();
  out.dst = h.getDst();
  out.sender = read_ref(h.getSender());
  out.request_id = h.getRequestId();
  if (h.getReply() > 2)
    throw frame_error("unknown frame kind " + std::to_string(h.getReply()));
  out.kind = static_cast<frame_kind>(h.getReply());
  if (out.kind != frame_kind::message && out.request_id == 0)
    throw frame_error("a reply without a request id");
  return out;
}

decoded_frame decode_checked(const void* header, std::size_t header_bytes, const slice& data,
                             const frame_context& ctx, const std::function<caf::actor(actor_ref)>& resolve) {
  if (header_bytes == 0 || header_bytes % sizeof(capnp::word) != 0)
    throw frame_error("header of " + std::to_string(header_bytes) + " bytes is not a whole number of words");
  if (header_bytes > ctx.limits.max_header_bytes)
    throw frame_error("header of " + std::to_string(header_bytes) + " bytes is over the limit of " +
                      std::to_string(ctx.limits.max_header_bytes));
  std::vector<capnp::word> words(header_bytes / sizeof(capnp::word)); // aligned copy (the header is small)
  std::memcpy(words.data(), header, header_bytes);
  capnp::ReaderOptions opts;
  opts.traversalLimitInWords = words.size() * 4;
  opts.nestingLimit = 16;
  capnp::FlatArrayMessageReader reader(kj::ArrayPtr<const capnp::word>(words.data(), words.size()), opts);
  auto h = reader.getRoot<wire::Header>();
  auto out = read_header(h, ctx);
  const frame_tensors tensors(h.getTensors(), data, ctx);
  auto values = h.getValues();
  if (values.size() > ctx.limits.max_values)
    throw frame_error("message of " + std::to_string(values.size()) + " elements is over the limit");
  caf::message_builder mb;
  for (auto v : values)
    read_value(mb, v, tensors, resolve);
  out.msg = mb.move_to_message();
  return out;
}

} // namespace

decoded_frame decode(const void* header, std::size_t header_bytes, const slice& data, const frame_context& ctx,
                     int peer, const std::function<caf::actor(actor_ref)>& resolve) {
  try {
    return decode_checked(header, header_bytes, data, ctx, resolve);
  } catch (const frame_error& e) {
    throw frame_error("bad frame" + (peer >= 0 ? " from rank " + std::to_string(peer) : std::string()) + ": " + e.what());
  } catch (const kj::Exception& e) {
    throw frame_error("bad frame" + (peer >= 0 ? " from rank " + std::to_string(peer) : std::string()) + ": " +
                      e.getDescription().cStr());
  }
}

} // namespace gradwire::transport
